package prometheus

import (
	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/oncekv/oncekv"
)

// labelled is one value of a per-handler counter, with the label values
// after handler.
type labelled struct {
	n      uint64
	labels []string
}

// handlerMetric is a counter with a handler label, read from a handler's
// Counters.
type handlerMetric struct {
	desc   *prom.Desc
	values func(c oncekv.Counters) []labelled
}

// storeMetric is a store-wide counter or gauge, read from Stats.
type storeMetric struct {
	desc  *prom.Desc
	kind  prom.ValueType
	value func(st *oncekv.Stats) float64
}

func desc(name, help string, labels ...string) *prom.Desc {
	return prom.NewDesc("oncekv_"+name, help, labels, nil)
}

func one(n uint64) []labelled { return []labelled{{n: n}} }

// handlerMetrics are the per-handler counters of the SPEC's observability
// list. oncekv_apply_total splits every request by how it ended; the other
// three repeat one result each under the name operators search for.
var handlerMetrics = []handlerMetric{
	{desc("apply_total", "Requests by how they ended: applied (effect committed), duplicate (stored response returned, effect not run), "+
		"key_reuse (same key, another payload), in_progress (a live claim held the key), failed (permanent failure recorded), "+
		"failed_replayed (a duplicate of a recorded failure), effect_error (transient, rolled back), "+
		"aborted (context ended, commit failed, record unreadable). Bad input is in oncekv_invalid_requests_total.", "handler", "result"),
		func(c oncekv.Counters) []labelled {
			return []labelled{
				{c.Applied, []string{"applied"}},
				{c.DuplicatesSuppressed, []string{"duplicate"}},
				{c.KeyReuses, []string{"key_reuse"}},
				{c.InProgressConflicts, []string{"in_progress"}},
				{c.FailedRecorded, []string{"failed"}},
				{c.FailedReplayed, []string{"failed_replayed"}},
				{c.EffectErrors, []string{"effect_error"}},
				{c.Aborted, []string{"aborted"}},
			}
		}},
	{desc("duplicates_suppressed_total", "Requests answered from a stored mark without running the effect. "+
		"Zero for long is suspicious, not good: at-least-once delivery does redeliver.", "handler"),
		func(c oncekv.Counters) []labelled { return one(c.DuplicatesSuppressed) }},
	{desc("idempotency_key_conflicts_total", "Requests refused with ErrInProgress because a live claim held the key (HTTP 409).", "handler"),
		func(c oncekv.Counters) []labelled { return one(c.InProgressConflicts) }},
	{desc("claims_fenced_total", "Claim operations (Extend, Complete, Fail) refused with ErrFenced: the claim had been taken over.", "handler"),
		func(c oncekv.Counters) []labelled { return one(c.Fenced) }},
	{desc("takeovers_total", "Claims that took a key over from an earlier attempt that recorded no outcome: its lease ran out, "+
		"it was released, or its process died. The earlier attempt may have made its external call (see probe_outcomes_total).", "handler"),
		func(c oncekv.Counters) []labelled { return one(c.Takeovers) }},
	{desc("probe_outcomes_total", "What a takeover's probe (ClaimWith) settled: applied (recorded DONE with the probe's response, "+
		"the effect not run again), parked (the outcome unknown: the key waits for an operator), park_refused (unknown, "+
		"with MaxParked keys parked already: still claimable). A probe's not applied lets the claim go on, counted nowhere here.", "handler", "outcome"),
		func(c oncekv.Counters) []labelled {
			return []labelled{{c.ProbeApplied, []string{"applied"}}, {c.Parked, []string{"parked"}}, {c.ParkRefused, []string{"park_refused"}}}
		}},
	{desc("parked_answers_total", "Requests refused with ErrParked: their key waits for an operator (oncekv resolve). Page someone.", "handler"),
		func(c oncekv.Counters) []labelled { return one(c.ParkedAnswers) }},
	{desc("tombstone_duplicates_total", "Duplicates that came after Retention and were answered from a tombstone, without their stored response: "+
		"Retention is shorter than this handler's redeliveries.", "handler"),
		func(c oncekv.Counters) []labelled { return one(c.TombstoneDuplicates) }},
	{desc("late_duplicates_total", "Keys applied again after every record of them had expired, estimated from Bloom filters of expired windows: "+
		"the window (Retention, TombstoneRetention) is too short for this handler.", "handler"),
		func(c oncekv.Counters) []labelled { return one(c.LateDuplicates) }},
}

func counter(name, help string, value func(st *oncekv.Stats) float64) storeMetric {
	return storeMetric{desc(name, help), prom.CounterValue, value}
}

func gauge(name, help string, value func(st *oncekv.Stats) float64) storeMetric {
	return storeMetric{desc(name, help), prom.GaugeValue, value}
}

// storeMetrics are the store-wide counters and gauges.
var storeMetrics = []storeMetric{
	counter("commits_total", "Write transactions committed.",
		func(st *oncekv.Stats) float64 { return float64(st.Commits) }),
	counter("invalid_requests_total", "Requests rejected as bad input (empty or oversized handler or key, ...), store-wide: "+
		"the handler name of a rejected request may be garbage, so it is no label.",
		func(st *oncekv.Stats) float64 { return float64(st.Total.InvalidRequests) }),
	counter("fenced_writes_total", "Writes refused by PutFenced (ErrFenced) and PutIfVersion (ErrVersionConflict, ErrUnversioned).",
		func(st *oncekv.Stats) float64 { return float64(st.FencedWrites) }),
	counter("bloom_negatives_total", "Window look-ups skipped because the window's Bloom filter said the key was not there.",
		func(st *oncekv.Stats) float64 { return float64(st.BloomNegatives) }),
	counter("bloom_false_positives_total", "Window look-ups the Bloom filter let through that found nothing.",
		func(st *oncekv.Stats) float64 { return float64(st.BloomFalsePositives) }),
	counter("expired_windows_total", "Windows of marks dropped by expiry.",
		func(st *oncekv.Stats) float64 { return float64(st.ExpiredWindows) }),
	counter("expired_marks_total", "Marks dropped by expiry; a retry of one of their keys is applied again.",
		func(st *oncekv.Stats) float64 { return float64(st.ExpiredMarks) }),
	counter("clock_jumps_total", "Forward jumps of the store's clock (Options.Now) over Options.MaxClockJump, each held back until confirmed: "+
		"a host clock stepping forward. Non-zero is worth a look at NTP.",
		func(st *oncekv.Stats) float64 { return float64(st.ClockJumps) }),
	gauge("live_marks", "Marks in the live windows.",
		func(st *oncekv.Stats) float64 { return float64(st.LiveMarks) }),
	gauge("parked_keys", "Keys parked now, waiting for an operator (oncekv parked, oncekv resolve); at most Options.MaxParked. Non-zero pages someone.",
		func(st *oncekv.Stats) float64 { return float64(st.ParkedKeys) }),
	gauge("tombstones", "Tombstones kept after Retention (Options.TombstoneRetention), about 22 bytes each on disk.",
		func(st *oncekv.Stats) float64 { return float64(st.Tombstones) }),
	gauge("tombstone_windows", "Windows that hold only tombstones.",
		func(st *oncekv.Stats) float64 { return float64(len(st.TombstoneWindows)) }),
	gauge("oldest_mark_age_seconds", "Age of the oldest live window holding marks; no mark is older. 0 with no marks.",
		func(st *oncekv.Stats) float64 { return st.OldestMarkAge.Seconds() }),
	gauge("windows", "Live windows.",
		func(st *oncekv.Stats) float64 { return float64(len(st.Windows)) }),
	gauge("bloom_filter_bytes", "Memory of the live windows' Bloom filters.",
		func(st *oncekv.Stats) float64 {
			n := 0
			for _, w := range st.Windows {
				n += w.FilterBytes
			}
			return float64(n)
		}),
	gauge("db_size_bytes", "Length of the bbolt file on disk. bbolt never shrinks it; see db_free_bytes.",
		func(st *oncekv.Stats) float64 { return float64(st.File.Size) }),
	gauge("db_high_water_bytes", "Part of the file pages were ever allocated in; above it is room bbolt grew ahead of need.",
		func(st *oncekv.Stats) float64 { return float64(st.File.HighWater) }),
	gauge("db_free_bytes", "Bytes of free and pending pages inside the file, which writes reuse before it grows.",
		func(st *oncekv.Stats) float64 { return float64(st.File.FreeBytes) }),
	gauge("db_free_pages", "Pages on the freelist, reusable by the next write.",
		func(st *oncekv.Stats) float64 { return float64(st.File.FreePages) }),
	gauge("db_pending_pages", "Pages freed that an open read transaction may still see.",
		func(st *oncekv.Stats) float64 { return float64(st.File.PendingPages) }),
	gauge("db_page_size_bytes", "Page size of the file.",
		func(st *oncekv.Stats) float64 { return float64(st.File.PageSize) }),
	gauge("db_freelist_bytes", "Size of the freelist as written at each commit; it grows with fragmentation.",
		func(st *oncekv.Stats) float64 { return float64(st.File.FreelistBytes) }),
	gauge("db_open_read_transactions", "Read transactions open now. A long one keeps freed pages pending and makes the file grow.",
		func(st *oncekv.Stats) float64 { return float64(st.File.OpenReadTxs) }),
	counter("db_read_transactions_total", "Read transactions started.",
		func(st *oncekv.Stats) float64 { return float64(st.File.ReadTxs) }),
}

var (
	commitDuration = desc("commit_duration_seconds",
		"Time from the start of a write transaction to the end of its commit, fsync and the effects inside it included.")
	requestsPerCommit = desc("requests_per_commit",
		"Marks written per commit (requests applied, failed, claimed or completed), over the commits that wrote any: the group size of group commit.")
	duplicateAge = desc("duplicate_age_seconds",
		"Age of each duplicate when it came: its time less its key's first delivery. Against Retention, how late redeliveries come "+
			"(oncekv advise).", "handler")
)

// descs lists every descriptor, for Describe.
var descs = func() []*prom.Desc {
	var all []*prom.Desc
	for _, m := range handlerMetrics {
		all = append(all, m.desc)
	}
	for _, m := range storeMetrics {
		all = append(all, m.desc)
	}
	for _, m := range queueMetrics {
		all = append(all, m.desc)
	}
	return append(all, commitDuration, requestsPerCommit, duplicateAge)
}()
