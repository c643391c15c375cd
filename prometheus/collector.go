// Package prometheus exports an oncekv store's Stats as Prometheus metrics.
//
// It is its own module, so that the core's go.mod stays bbolt and msgpack
// only. Register one Collector per DB (New, then Collector.AddQueue for
// each queue; ExampleNew). docs/metrics.md in the repository lists every
// metric.
//
// Every metric is read from one DB.Stats snapshot at scrape time (and one
// queue.Stats per queue added with AddQueue); the collector keeps no
// counters of its own. The counters start at zero when
// the store is opened, so they reset when the process restarts (or reopens
// the store): Prometheus's rate() and increase() expect exactly that and
// treat a drop as a reset. Gauges (live marks, file size, ...) describe the
// store as it is.
//
// Names follow Prometheus's conventions: an oncekv_ prefix, base units
// (seconds, bytes), _total on counters. The only label with values from
// the user is handler, the Request.Handler; keys never become label values.
// Handlers are capped (Options.MaxHandlers): past the cap, new handlers are
// summed under handler="_other", so a bug that invents handler names cannot
// explode the number of series. Requests rejected as bad input are counted
// store-wide, without a handler label.
package prometheus

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
)

// OtherHandler is the handler label value that sums every handler past
// Options.MaxHandlers, every handler name that is not valid UTF-8 (a label
// value must be), and a handler literally named "_other".
const OtherHandler = "_other"

// DefaultMaxHandlers is the default of Options.MaxHandlers.
const DefaultMaxHandlers = 100

// ErrInvalidOptions: New was given a nil DB or an invalid option.
var ErrInvalidOptions = errors.New("oncekv: prometheus: invalid collector options")

// Options configures a Collector. Pass nil for the defaults.
type Options struct {
	// MaxHandlers caps the handler label values one Collector reports on
	// its own. The first MaxHandlers handlers it sees (in name order within
	// a scrape) keep their series for the Collector's life; later ones go
	// to handler="_other". Once chosen, a handler never moves, so every
	// series, _other included, only grows between restarts, as a counter
	// must. Default 100; it must not be negative.
	MaxHandlers int
}

// Collector is a prometheus.Collector over one DB's Stats. It is safe for
// concurrent scrapes.
type Collector struct {
	db  *oncekv.DB
	max int

	mu sync.Mutex
	// admitted holds the handlers with their own series; at most max of
	// them, so it is bounded whatever handler names the store sees.
	admitted map[string]bool
	// queues are the queues added with AddQueue, each with its own name.
	queues []*queue.Queue
}

// New returns a Collector of db's Stats.
func New(db *oncekv.DB, opts *Options) (*Collector, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if db == nil {
		return nil, fmt.Errorf("%w: nil DB", ErrInvalidOptions)
	}
	if o.MaxHandlers < 0 {
		return nil, fmt.Errorf("%w: MaxHandlers = %d: must not be negative (zero means %d)", ErrInvalidOptions, o.MaxHandlers, DefaultMaxHandlers)
	}
	if o.MaxHandlers == 0 {
		o.MaxHandlers = DefaultMaxHandlers
	}
	return &Collector{db: db, max: o.MaxHandlers, admitted: map[string]bool{}}, nil
}

// Describe sends the descriptor of every metric the Collector exports.
func (c *Collector) Describe(ch chan<- *prom.Desc) {
	for _, d := range descs {
		ch <- d
	}
}

// Collect takes one Stats snapshot and sends every metric from it.
func (c *Collector) Collect(ch chan<- prom.Metric) {
	st := c.db.Stats()
	counters, ages := c.byLabel(&st)
	for h, a := range ages {
		buckets := make(map[float64]uint64, oncekv.AgeBuckets)
		for i, b := range oncekv.AgeBounds() {
			buckets[b.Seconds()] = a.Buckets[i]
		}
		ch <- prom.MustNewConstHistogram(duplicateAge, a.Count, a.Sum.Seconds(), buckets, h)
	}
	for h, counters := range counters {
		for _, m := range handlerMetrics {
			for _, v := range m.values(counters) {
				ch <- prom.MustNewConstMetric(m.desc, prom.CounterValue, float64(v.n), append([]string{h}, v.labels...)...)
			}
		}
	}
	for _, m := range storeMetrics {
		ch <- prom.MustNewConstMetric(m.desc, m.kind, m.value(&st))
	}
	hist := st.CommitHistograms
	durations := map[float64]uint64{}
	for i, b := range oncekv.CommitDurationBounds() {
		durations[b.Seconds()] = hist.Duration[i]
	}
	ch <- prom.MustNewConstHistogram(commitDuration, hist.Count, hist.DurationSum.Seconds(), durations)
	requests := map[float64]uint64{}
	for i, b := range oncekv.CommitRequestBounds() {
		requests[float64(b)] = hist.Requests[i]
	}
	ch <- prom.MustNewConstHistogram(requestsPerCommit, hist.MarkCommits, float64(hist.RequestSum), requests)
	c.collectQueues(ch)
}

// byLabel maps each handler to its label value and sums the handlers that
// share one (_other), their counters and their duplicates' ages. Whatever
// Total holds beyond the handlers listed (the handlers past the store's own
// cap, Options.MaxHandlerStats) is _other's too. Invalid requests are left
// out: a rejected request's handler name may be garbage, so they are
// counted store-wide (oncekv_invalid_requests_total).
func (c *Collector) byLabel(st *oncekv.Stats) (map[string]oncekv.Counters, map[string]oncekv.AgeHistogram) {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(st.Handlers))
	for h := range st.Handlers {
		names = append(names, h)
	}
	slices.Sort(names) // so that which handlers get in under the cap does not depend on map order
	out := make(map[string]oncekv.Counters, min(len(names), c.max+1))
	ages := make(map[string]oncekv.AgeHistogram, min(len(names), c.max+1))
	listed := oncekv.Counters{}
	for _, h := range names {
		label := h
		if !c.admitted[h] {
			if len(c.admitted) < c.max && h != OtherHandler && utf8.ValidString(h) {
				c.admitted[h] = true
			} else {
				label = OtherHandler
			}
		}
		out[label] = add(out[label], st.Handlers[h])
		ages[label] = ages[label].Add(st.DuplicateAges[h])
		listed = add(listed, st.Handlers[h])
	}
	if rest := st.Total.Sub(listed); rest != (oncekv.Counters{InvalidRequests: rest.InvalidRequests}) {
		out[OtherHandler] = add(out[OtherHandler], rest)
	}
	if st.OtherDuplicateAges.Count > 0 {
		ages[OtherHandler] = ages[OtherHandler].Add(st.OtherDuplicateAges)
	}
	for label, counters := range out {
		counters.InvalidRequests = 0
		out[label] = counters
	}
	return out, ages
}

// add returns a + b. Counters has a Sub and no Add; Sub of the two's
// complement would hide the intent.
func add(a, b oncekv.Counters) oncekv.Counters {
	a.Applied += b.Applied
	a.DuplicatesSuppressed += b.DuplicatesSuppressed
	a.InProgressConflicts += b.InProgressConflicts
	a.KeyReuses += b.KeyReuses
	a.FailedRecorded += b.FailedRecorded
	a.FailedReplayed += b.FailedReplayed
	a.EffectErrors += b.EffectErrors
	a.InvalidRequests += b.InvalidRequests
	a.Aborted += b.Aborted
	a.Fenced += b.Fenced
	a.Takeovers += b.Takeovers
	a.ProbeApplied += b.ProbeApplied
	a.Parked += b.Parked
	a.ParkRefused += b.ParkRefused
	a.ParkedAnswers += b.ParkedAnswers
	a.TombstoneDuplicates += b.TombstoneDuplicates
	a.LateDuplicates += b.LateDuplicates
	return a
}
