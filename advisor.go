package oncekv

import (
	"context"
	"log/slog"
	"sort"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/layout"
)

// The window advisor: how old each duplicate was when it came (its time
// less its key's FirstSeen), per handler, in Stats.DuplicateAges and in the
// report a clean Close saves for `oncekv advise` (DB.WindowReport).
// Duplicates that come close to Retention say the window is too short
// before any is lost (docs/window.md).

// AgeBuckets is the length of AgeHistogram.Buckets.
const AgeBuckets = layout.AgeBuckets

const day = 24 * time.Hour

// ageBounds span a retry within the second to a redelivery a year later,
// a day apart around the default Retention of 7 days.
var ageBounds = [AgeBuckets]time.Duration{
	time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 9 * time.Hour, 12 * time.Hour, 18 * time.Hour,
	day, 36 * time.Hour, 2 * day, 3 * day, 4 * day, 5 * day, 6 * day, 7 * day, 10 * day, 14 * day, 21 * day,
	30 * day, 45 * day, 60 * day, 90 * day, 180 * day, 365 * day,
}

// AgeBounds returns the upper bounds of AgeHistogram's buckets: 1s, 10s,
// 30s, 1m, 5m, 15m, 30m, 1h, 2h, 3h, 6h, 9h, 12h, 18h, 1d, 36h, 2d, 3d,
// ... 7d, 10d, 14d, 21d, 30d, 45d, 60d, 90d, 180d, 365d. The array is a
// copy.
func AgeBounds() [AgeBuckets]time.Duration { return ageBounds }

// AgeHistogram is a cumulative histogram of duplicates' ages, in the
// fixed buckets of AgeBounds, as Prometheus takes them: Buckets[i] counts
// the ages at most AgeBounds()[i], and Count is the +Inf bucket.
type AgeHistogram struct {
	Count   uint64
	Buckets [AgeBuckets]uint64
	// Sum is the total of the Count ages.
	Sum time.Duration
	// Max is the oldest age seen; a Sub keeps the later snapshot's.
	Max time.Duration
}

// Sub returns h - other, bucket by bucket, for the duplicates between two
// snapshots; Max is h's.
func (h AgeHistogram) Sub(other AgeHistogram) AgeHistogram {
	d := AgeHistogram{Count: h.Count - other.Count, Sum: h.Sum - other.Sum, Max: h.Max}
	for i := range d.Buckets {
		d.Buckets[i] = h.Buckets[i] - other.Buckets[i]
	}
	return d
}

// Add returns h + other, bucket by bucket (Max the larger), to sum the
// histograms of several handlers or stores.
func (h AgeHistogram) Add(other AgeHistogram) AgeHistogram {
	h.Count += other.Count
	h.Sum += other.Sum
	h.Max = max(h.Max, other.Max)
	for i := range h.Buckets {
		h.Buckets[i] += other.Buckets[i]
	}
	return h
}

// Quantile returns an upper bound of the q-th quantile (0 < q <= 1) of
// the ages: the bound of the first bucket holding that share of them, or
// Max when that is lower or the quantile is past the last bound. Zero for
// an empty histogram.
func (h AgeHistogram) Quantile(q float64) time.Duration {
	if h.Count == 0 {
		return 0
	}
	rank := uint64(q * float64(h.Count))
	if float64(rank) < q*float64(h.Count) || rank == 0 {
		rank++ // the ceiling: the rank-th smallest age, counting from 1
	}
	i := sort.Search(AgeBuckets, func(i int) bool { return h.Buckets[i] >= rank })
	if i == AgeBuckets {
		return h.Max
	}
	return min(ageBounds[i], h.Max)
}

// ageCounter is AgeHistogram's concurrent form: each bucket counts its own
// ages (one atomic add per duplicate, on the fast path), made cumulative
// by snapshot.
type ageCounter struct {
	buckets      [AgeBuckets + 1]atomic.Uint64 // the last one is past every bound
	sum, highest atomic.Int64
}

// observe counts one duplicate of age a (a negative one, from a clock set
// back, as zero).
func (c *ageCounter) observe(a time.Duration) {
	a = max(a, 0)
	i := 0
	for i < AgeBuckets && a > ageBounds[i] {
		i++ // most duplicates come within the first few bounds
	}
	c.buckets[i].Add(1)
	c.sum.Add(int64(a))
	for {
		m := c.highest.Load()
		if int64(a) <= m || c.highest.CompareAndSwap(m, int64(a)) {
			return
		}
	}
}

// snapshot returns the ages counted so far. Its fields are read one by one,
// so a snapshot taken while duplicates are counted may be off by those.
func (c *ageCounter) snapshot() AgeHistogram {
	var h AgeHistogram
	var run uint64
	for i := range AgeBuckets {
		run += c.buckets[i].Load()
		h.Buckets[i] = run
	}
	h.Count = run + c.buckets[AgeBuckets].Load()
	h.Sum, h.Max = time.Duration(c.sum.Load()), time.Duration(c.highest.Load())
	return h
}

// noteDuplicate counts a duplicate (its kind, its age and, when a
// tombstone answered it, the tombstone duplicate), with one look-up of the
// handler's counters, and logs it: at info ("duplicate suppressed"), or at
// warn when its response had expired, the sign of a Retention shorter than
// the handler's redeliveries.
func (db *DB) noteDuplicate(ctx context.Context, handler, key string, kind outcome, res *Result) {
	age := db.clock.read().Sub(res.FirstSeen)
	c := db.stats.countersOf(handler)
	c.n[kind].Add(1)
	c.ages.observe(age)
	switch {
	case res.ResponseExpired:
		c.n[countTombstone].Add(1)
		db.log.LogAttrs(ctx, slog.LevelWarn, "duplicate answered from a tombstone: its stored response had expired",
			slog.String("handler", handler), slog.String("key", key), slog.Duration("age", age),
			slog.Duration("retention", db.opts.Retention))
	case kind == outcomeDuplicate && db.log.Enabled(ctx, slog.LevelInfo):
		db.log.LogAttrs(ctx, slog.LevelInfo, "duplicate suppressed",
			slog.String("handler", handler), slog.String("key", key), slog.Duration("age", age))
	}
}

// HandlerWindow is what the window advisor knows of one handler.
type HandlerWindow struct {
	// DuplicateAges are the ages of its duplicates.
	DuplicateAges AgeHistogram
	// TombstoneDuplicates and LateDuplicates are Counters' of the same
	// names.
	TombstoneDuplicates, LateDuplicates uint64
}

func (h HandlerWindow) add(o HandlerWindow) HandlerWindow {
	return HandlerWindow{DuplicateAges: h.DuplicateAges.Add(o.DuplicateAges),
		TombstoneDuplicates: h.TombstoneDuplicates + o.TombstoneDuplicates, LateDuplicates: h.LateDuplicates + o.LateDuplicates}
}

// WindowReport is the window advisor's view of the store: how late each
// handler's duplicates come, summed over every process that closed the
// store cleanly, and this one since Open. `oncekv advise` prints it.
type WindowReport struct {
	// SavedAt is when a Close last saved the report in the file; zero if
	// none did.
	SavedAt time.Time
	// Retention and TombstoneRetention are those the report is to be read
	// against: the DB's own, or on a read-only DB those of the process that
	// saved the report.
	Retention, TombstoneRetention time.Duration
	// Handlers holds each handler's figures, at most
	// Options.MaxHandlerStats of them; Other sums those past the cap.
	Handlers map[string]HandlerWindow
	Other    HandlerWindow
}

// WindowReport returns the report: what the file holds, as the last clean
// Close saved it, plus what this DB counted since Open. Close saves it
// again when there is something new. It takes no transaction.
func (db *DB) WindowReport() WindowReport {
	r := db.advisor.saved
	r.Handlers = make(map[string]HandlerWindow, len(db.advisor.saved.Handlers))
	for h, w := range db.advisor.saved.Handlers {
		r.Handlers[h] = w
	}
	if !db.opts.ReadOnly || r.SavedAt.IsZero() {
		r.Retention, r.TombstoneRetention = db.opts.Retention, db.opts.TombstoneRetention
	}
	st := db.stats.snapshot()
	for h, c := range st.Handlers {
		r.addHandler(h, HandlerWindow{DuplicateAges: st.DuplicateAges[h], TombstoneDuplicates: c.TombstoneDuplicates, LateDuplicates: c.LateDuplicates},
			db.stats.maxHandlers)
	}
	r.Other = r.Other.add(HandlerWindow{DuplicateAges: st.OtherDuplicateAges,
		TombstoneDuplicates: st.OtherHandlers.TombstoneDuplicates, LateDuplicates: st.OtherHandlers.LateDuplicates})
	return r
}

// addHandler adds w to handler's figures, or to Other once the report
// holds max handlers.
func (r *WindowReport) addHandler(handler string, w HandlerWindow, max int) {
	if old, ok := r.Handlers[handler]; ok || len(r.Handlers) < max {
		r.Handlers[handler] = old.add(w)
		return
	}
	r.Other = r.Other.add(w)
}

// advisorState is the report the file held at Open; set before the DB is
// shared and read-only after.
type advisorState struct{ saved WindowReport }

// loadAdvisor reads the report the last clean Close saved; one that does
// not decode is dropped with a warning (it only advises).
func (db *DB) loadAdvisor(tx *bolt.Tx) error {
	db.advisor.saved = WindowReport{Handlers: map[string]HandlerWindow{}}
	a, ok, err := layout.ReadAdvisor(tx)
	if err != nil {
		db.log.Warn("dropping the window advisor's damaged record", "err", err)
		return nil
	}
	if !ok {
		return nil
	}
	r := &db.advisor.saved
	r.SavedAt = timeFromNano(a.SavedAt)
	r.Retention, r.TombstoneRetention = time.Duration(a.Retention), time.Duration(a.TombstoneRetention)
	for i := range a.Handlers {
		r.addHandler(a.Handlers[i].Name, handlerWindowOf(&a.Handlers[i]), db.stats.maxHandlers)
	}
	r.Other = r.Other.add(handlerWindowOf(&a.Other))
	return nil
}

func handlerWindowOf(h *layout.AdvisorHandler) HandlerWindow {
	return HandlerWindow{TombstoneDuplicates: h.TombstoneDuplicates, LateDuplicates: h.LateDuplicates,
		DuplicateAges: AgeHistogram{Count: h.Count, Buckets: h.Buckets, Sum: time.Duration(h.Sum), Max: time.Duration(h.Max)}}
}

func advisorHandlerOf(name string, w HandlerWindow) layout.AdvisorHandler {
	a := w.DuplicateAges
	return layout.AdvisorHandler{Name: name, TombstoneDuplicates: w.TombstoneDuplicates, LateDuplicates: w.LateDuplicates,
		Count: a.Count, Sum: int64(a.Sum), Max: int64(a.Max), Buckets: a.Buckets}
}

// advisorToSave returns the report for Close to save, false when this DB
// counted nothing since Open: an untouched store stays as it was.
func (db *DB) advisorToSave(now time.Time) (*layout.Advisor, bool) {
	st := db.stats.snapshot()
	if st.TotalDuplicateAges.Count == 0 && st.Total.TombstoneDuplicates == 0 && st.Total.LateDuplicates == 0 {
		return nil, false
	}
	r := db.WindowReport()
	a := &layout.Advisor{SavedAt: now.UnixNano(), Retention: int64(r.Retention), TombstoneRetention: int64(r.TombstoneRetention),
		Other: advisorHandlerOf("", r.Other)}
	names := make([]string, 0, len(r.Handlers))
	for h := range r.Handlers {
		names = append(names, h)
	}
	sort.Strings(names)
	for _, h := range names {
		a.Handlers = append(a.Handlers, advisorHandlerOf(h, r.Handlers[h]))
	}
	return a, true
}
