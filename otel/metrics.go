package otel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/oncekv/oncekv"
)

// OtherHandler is the handler attribute value that sums every handler past
// Options.MaxHandlers, every handler name that is not valid UTF-8, and a
// handler literally named "_other".
const OtherHandler = "_other"

// The attributes of the instruments: the Prometheus module's label names,
// so that both exporters give the same series.
const (
	metricHandler = attribute.Key("handler")
	metricResult  = attribute.Key("result")
	metricQueue   = attribute.Key("queue")
	metricOutcome = attribute.Key("outcome")
)

// ErrNilArgument: ObserveDB, ObserveQueue or ObserveRelay was given nil.
var ErrNilArgument = errors.New("oncekv: otel: nil argument")

// observed is one asynchronous instrument and how to read its value from a
// snapshot of type S.
type observed[S any] struct {
	inst  metric.Float64Observable
	value func(s *S) float64
}

// spec describes an instrument to make.
type spec[S any] struct {
	name, unit, desc string
	counter          bool
	value            func(s *S) float64
}

// make creates the instruments of specs on m.
func makeAll[S any](m metric.Meter, specs []spec[S]) ([]observed[S], error) {
	out := make([]observed[S], 0, len(specs))
	for _, s := range specs {
		var inst metric.Float64Observable
		var err error
		if s.counter {
			inst, err = m.Float64ObservableCounter(s.name, metric.WithUnit(s.unit), metric.WithDescription(s.desc))
		} else {
			inst, err = m.Float64ObservableGauge(s.name, metric.WithUnit(s.unit), metric.WithDescription(s.desc))
		}
		if err != nil {
			return nil, fmt.Errorf("oncekv: otel: instrument %s: %w", s.name, err)
		}
		out = append(out, observed[S]{inst, s.value})
	}
	return out, nil
}

// observeAll reports every instrument of obs from s, with attrs.
func observeAll[S any](o metric.Observer, obs []observed[S], s *S, attrs metric.MeasurementOption) {
	for _, in := range obs {
		o.ObserveFloat64(in.inst, in.value(s), attrs)
	}
}

// instruments are every instrument of a Telemetry, made once by New.
type instruments struct {
	handler []observed[oncekv.Counters]
	results metric.Float64ObservableCounter // oncekv.apply, by handler and result
	probes  metric.Float64ObservableCounter // oncekv.probe_outcomes, by handler and outcome
	store   []observed[oncekv.Stats]
	queue   []observed[queueSnapshot]
	relay   []observed[relaySnapshot]
}

func newInstruments(m metric.Meter) (*instruments, error) {
	var in instruments
	var errs [6]error
	in.results, errs[0] = m.Float64ObservableCounter("oncekv.apply", metric.WithUnit("{request}"),
		metric.WithDescription("Requests by how they ended: applied (effect committed), duplicate (stored response returned, effect not run), "+
			"key_reuse (same key, another payload), in_progress (a live claim held the key), failed (permanent failure recorded), "+
			"failed_replayed (a duplicate of a recorded failure), effect_error (transient, rolled back), "+
			"aborted (context ended, commit failed, record unreadable). Bad input is in oncekv.invalid_requests."))
	in.probes, errs[5] = m.Float64ObservableCounter("oncekv.probe_outcomes", metric.WithUnit("{takeover}"),
		metric.WithDescription("What a takeover's probe (ClaimWith) settled: applied (recorded DONE with the probe's response, the effect "+
			"not run again), parked (the outcome unknown: the key waits for an operator), park_refused (unknown, with MaxParked keys "+
			"parked already: still claimable). A probe's not applied lets the claim go on, counted nowhere here."))
	in.handler, errs[1] = makeAll(m, handlerSpecs)
	in.store, errs[2] = makeAll(m, storeSpecs)
	in.queue, errs[3] = makeAll(m, queueSpecs)
	in.relay, errs[4] = makeAll(m, relaySpecs)
	return &in, errors.Join(errs[:]...)
}

func (in *instruments) handlerObservables() []metric.Observable {
	all := []metric.Observable{in.results, in.probes}
	for _, o := range in.handler {
		all = append(all, o.inst)
	}
	for _, o := range in.store {
		all = append(all, o.inst)
	}
	return all
}

func observables[S any](obs []observed[S]) []metric.Observable {
	all := make([]metric.Observable, 0, len(obs))
	for _, o := range obs {
		all = append(all, o.inst)
	}
	return all
}

// result is one value of oncekv.apply.
type result struct {
	name string
	n    uint64
}

// results are the values of oncekv.apply, by result, with the Prometheus
// module's result names.
func results(c *oncekv.Counters) []result {
	return []result{
		{"applied", c.Applied}, {"duplicate", c.DuplicatesSuppressed}, {"key_reuse", c.KeyReuses},
		{"in_progress", c.InProgressConflicts}, {"failed", c.FailedRecorded}, {"failed_replayed", c.FailedReplayed},
		{"effect_error", c.EffectErrors}, {"aborted", c.Aborted},
	}
}

// observeResults reports each of rs on inst, with attrs and key set to
// its name.
func observeResults(o metric.Observer, inst metric.Float64Observable, rs []result, key attribute.Key, attrs []attribute.KeyValue) {
	for _, r := range rs {
		o.ObserveFloat64(inst, float64(r.n), metric.WithAttributeSet(attribute.NewSet(append(attrs, key.String(r.name))...)))
	}
}

// probeOutcomes are the values of oncekv.probe_outcomes, by outcome, with
// the Prometheus module's outcome names.
func probeOutcomes(c *oncekv.Counters) []result {
	return []result{{"applied", c.ProbeApplied}, {"parked", c.Parked}, {"park_refused", c.ParkRefused}}
}

// handlerSpecs are the per-handler counters of the SPEC's observability
// list, beside oncekv.apply.
var handlerSpecs = []spec[oncekv.Counters]{
	{"oncekv.duplicates_suppressed", "{request}", "Requests answered from a stored mark without running the effect. " +
		"Zero for long is suspicious, not good: at-least-once delivery does redeliver.", true,
		func(c *oncekv.Counters) float64 { return float64(c.DuplicatesSuppressed) }},
	{"oncekv.idempotency_key_conflicts", "{request}", "Requests refused with ErrInProgress because a live claim held the key (HTTP 409).", true,
		func(c *oncekv.Counters) float64 { return float64(c.InProgressConflicts) }},
	{"oncekv.claims_fenced", "{operation}", "Claim operations (Extend, Complete, Fail) refused with ErrFenced: the claim had been taken over.", true,
		func(c *oncekv.Counters) float64 { return float64(c.Fenced) }},
	{"oncekv.takeovers", "{claim}", "Claims that took a key over from an earlier attempt that recorded no outcome: its lease ran out, " +
		"it was released, or its process died. The earlier attempt may have made its external call (see oncekv.probe_outcomes).", true,
		func(c *oncekv.Counters) float64 { return float64(c.Takeovers) }},
	{"oncekv.parked_answers", "{request}", "Requests refused with ErrParked: their key waits for an operator (oncekv resolve). Page someone.", true,
		func(c *oncekv.Counters) float64 { return float64(c.ParkedAnswers) }},
	{"oncekv.tombstone_duplicates", "{request}", "Duplicates that came after Retention and were answered from a tombstone, without their " +
		"stored response: Retention is shorter than this handler's redeliveries.", true,
		func(c *oncekv.Counters) float64 { return float64(c.TombstoneDuplicates) }},
	{"oncekv.late_duplicates", "{request}", "Keys applied again after every record of them had expired, estimated from Bloom filters of " +
		"expired windows: the window (Retention, TombstoneRetention) is too short for this handler.", true,
		func(c *oncekv.Counters) float64 { return float64(c.LateDuplicates) }},
}

func storeCounter(name, unit, desc string, value func(st *oncekv.Stats) float64) spec[oncekv.Stats] {
	return spec[oncekv.Stats]{name, unit, desc, true, value}
}

func storeGauge(name, unit, desc string, value func(st *oncekv.Stats) float64) spec[oncekv.Stats] {
	return spec[oncekv.Stats]{name, unit, desc, false, value}
}

// storeSpecs are the store-wide counters and gauges: the dedup table's
// size (live marks) and age (oldest mark), the file, the filters.
var storeSpecs = []spec[oncekv.Stats]{
	storeCounter("oncekv.commits", "{commit}", "Write transactions committed.",
		func(st *oncekv.Stats) float64 { return float64(st.Commits) }),
	storeCounter("oncekv.invalid_requests", "{request}", "Requests rejected as bad input (empty or oversized handler or key, ...), store-wide: "+
		"the handler name of a rejected request may be garbage, so it is no attribute.",
		func(st *oncekv.Stats) float64 { return float64(st.Total.InvalidRequests) }),
	storeCounter("oncekv.fenced_writes", "{write}", "Writes refused by PutFenced (ErrFenced) and PutIfVersion (ErrVersionConflict, ErrUnversioned).",
		func(st *oncekv.Stats) float64 { return float64(st.FencedWrites) }),
	storeCounter("oncekv.bloom.negatives", "{lookup}", "Window look-ups skipped because the window's Bloom filter said the key was not there.",
		func(st *oncekv.Stats) float64 { return float64(st.BloomNegatives) }),
	storeCounter("oncekv.bloom.false_positives", "{lookup}", "Window look-ups the Bloom filter let through that found nothing.",
		func(st *oncekv.Stats) float64 { return float64(st.BloomFalsePositives) }),
	storeCounter("oncekv.expired.windows", "{window}", "Windows of marks dropped by expiry.",
		func(st *oncekv.Stats) float64 { return float64(st.ExpiredWindows) }),
	storeCounter("oncekv.expired.marks", "{mark}", "Marks dropped by expiry; a retry of one of their keys is applied again.",
		func(st *oncekv.Stats) float64 { return float64(st.ExpiredMarks) }),
	storeCounter("oncekv.clock_jumps", "{jump}", "Forward jumps of the store's clock over Options.MaxClockJump, each held back until confirmed.",
		func(st *oncekv.Stats) float64 { return float64(st.ClockJumps) }),
	storeGauge("oncekv.live_marks", "{mark}", "Marks in the live windows: the size of the dedup table.",
		func(st *oncekv.Stats) float64 { return float64(st.LiveMarks) }),
	storeGauge("oncekv.parked_keys", "{key}", "Keys parked now, waiting for an operator (oncekv parked, oncekv resolve); at most "+
		"Options.MaxParked. Non-zero pages someone.",
		func(st *oncekv.Stats) float64 { return float64(st.ParkedKeys) }),
	storeGauge("oncekv.tombstones", "{tombstone}", "Tombstones kept after Retention (Options.TombstoneRetention).",
		func(st *oncekv.Stats) float64 { return float64(st.Tombstones) }),
	storeGauge("oncekv.tombstone_windows", "{window}", "Windows that hold only tombstones.",
		func(st *oncekv.Stats) float64 { return float64(len(st.TombstoneWindows)) }),
	storeGauge("oncekv.oldest_mark.age", "s", "Age of the oldest live window holding marks (no mark is older): the age of the dedup table. 0 with no marks.",
		func(st *oncekv.Stats) float64 { return st.OldestMarkAge.Seconds() }),
	storeGauge("oncekv.windows", "{window}", "Live windows.",
		func(st *oncekv.Stats) float64 { return float64(len(st.Windows)) }),
	storeGauge("oncekv.bloom.filter", "By", "Memory of the live windows' Bloom filters.",
		func(st *oncekv.Stats) float64 {
			n := 0
			for _, w := range st.Windows {
				n += w.FilterBytes
			}
			return float64(n)
		}),
	storeGauge("oncekv.db.size", "By", "Length of the bbolt file on disk. bbolt never shrinks it; see oncekv.db.free.",
		func(st *oncekv.Stats) float64 { return float64(st.File.Size) }),
	storeGauge("oncekv.db.high_water", "By", "Part of the file pages were ever allocated in; above it is room bbolt grew ahead of need.",
		func(st *oncekv.Stats) float64 { return float64(st.File.HighWater) }),
	storeGauge("oncekv.db.free", "By", "Bytes of free and pending pages inside the file, which writes reuse before it grows.",
		func(st *oncekv.Stats) float64 { return float64(st.File.FreeBytes) }),
	storeGauge("oncekv.db.free_pages", "{page}", "Pages on the freelist, reusable by the next write.",
		func(st *oncekv.Stats) float64 { return float64(st.File.FreePages) }),
	storeGauge("oncekv.db.pending_pages", "{page}", "Pages freed that an open read transaction may still see.",
		func(st *oncekv.Stats) float64 { return float64(st.File.PendingPages) }),
	storeGauge("oncekv.db.page_size", "By", "Page size of the file.",
		func(st *oncekv.Stats) float64 { return float64(st.File.PageSize) }),
	storeGauge("oncekv.db.freelist", "By", "Size of the freelist as written at each commit; it grows with fragmentation.",
		func(st *oncekv.Stats) float64 { return float64(st.File.FreelistBytes) }),
	storeGauge("oncekv.db.open_read_transactions", "{transaction}", "Read transactions open now. A long one keeps freed pages pending and makes the file grow.",
		func(st *oncekv.Stats) float64 { return float64(st.File.OpenReadTxs) }),
	storeCounter("oncekv.db.read_transactions", "{transaction}", "Read transactions started.",
		func(st *oncekv.Stats) float64 { return float64(st.File.ReadTxs) }),
}

// ObserveDB reports db's Stats through the Telemetry's meter: one
// db.Stats() snapshot per collection feeds every instrument (the article's
// duplicates suppressed per handler, key conflicts, the dedup table's size
// and age, and the rest the Prometheus module exports, under the same
// names once an exporter turns dots into underscores and adds units and
// _total). attrs are added to every measurement, to tell two stores of one
// process apart. Nothing is counted twice: the counters are the store's,
// since it was opened. Unregister the returned registration before closing
// db, or collections report a closed store's last counters. Errors:
// ErrNilArgument; the meter's.
func (t *Telemetry) ObserveDB(db *oncekv.DB, attrs ...attribute.KeyValue) (metric.Registration, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil DB", ErrNilArgument)
	}
	attrs = slices.Clip(slices.Clone(attrs)) // callbacks append to it concurrently
	h := &handlers{max: t.opts.MaxHandlers, admitted: map[string]bool{}}
	base := attribute.NewSet(attrs...)
	store := metric.WithAttributeSet(base)
	return t.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := db.Stats()
		for label, c := range h.byLabel(&st) {
			with := metric.WithAttributeSet(attribute.NewSet(append(attrs, metricHandler.String(label))...))
			observeAll(o, t.inst.handler, &c, with)
			observeResults(o, t.inst.results, results(&c), metricResult, append(attrs, metricHandler.String(label)))
			observeResults(o, t.inst.probes, probeOutcomes(&c), metricOutcome, append(attrs, metricHandler.String(label)))
		}
		observeAll(o, t.inst.store, &st, store)
		return nil
	}, t.inst.handlerObservables()...)
}

// handlers maps handler names to attribute values under a cap.
type handlers struct {
	max int
	mu  sync.Mutex
	// admitted holds the handlers with their own series: at most max, so
	// it is bounded whatever handler names the store sees.
	admitted map[string]bool
}

// byLabel maps each handler to its attribute value and sums those that
// share one (_other). Whatever Total holds beyond the handlers listed (the
// store's own cap, Options.MaxHandlerStats) is _other's too. Invalid
// requests are left out: they are counted store-wide.
func (h *handlers) byLabel(st *oncekv.Stats) map[string]oncekv.Counters {
	h.mu.Lock()
	defer h.mu.Unlock()
	names := make([]string, 0, len(st.Handlers))
	for name := range st.Handlers {
		names = append(names, name)
	}
	slices.Sort(names) // which handlers get in under the cap must not depend on map order
	out := make(map[string]oncekv.Counters, min(len(names), h.max)+1)
	var listed oncekv.Counters
	for _, name := range names {
		label := name
		if !h.admitted[name] {
			if len(h.admitted) < h.max && name != OtherHandler && utf8.ValidString(name) {
				h.admitted[name] = true
			} else {
				label = OtherHandler
			}
		}
		out[label] = sum(out[label], st.Handlers[name])
		listed = sum(listed, st.Handlers[name])
	}
	rest := st.Total.Sub(listed)
	rest.InvalidRequests = 0
	if rest != (oncekv.Counters{}) {
		out[OtherHandler] = sum(out[OtherHandler], rest)
	}
	return out
}

// sum returns a + b, but for InvalidRequests, which no handler has.
func sum(a, b oncekv.Counters) oncekv.Counters {
	s := a.Add(b)
	s.InvalidRequests = a.InvalidRequests
	return s
}
