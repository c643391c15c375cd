package oncekv

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/layout"
)

// RewindStats is what RewindClock changed.
type RewindStats struct {
	// From is the store's time the file held: its saved clock, or its
	// newest window's start when that is later.
	From time.Time
	// To is the time the store resumes from.
	To time.Time
	// Windows is the number of windows after To's that were folded into it.
	Windows int
	// Marks is the number of marks moved out of those windows.
	Marks int
	// Leases is the number of claims whose lease ended after To and now
	// ends at To.
	Leases int
}

// RewindClock sets the time the store file at path resumes from back to to:
// the way out of a clock saved far in the future (a glitched reading that
// was confirmed, or taken at Open). The file must not be open elsewhere; it
// waits Options.OpenTimeout for the lock, like Open. Every mark of a window
// after to's moves into to's window with its FirstSeen at most to, so none is
// lost and each is kept at least Retention from to; a claim's lease that
// ends after to ends at to; the Bloom filters these windows had are dropped
// for the next Open to rebuild. Give to the true time: a mark really written
// after it would be kept a little less than Retention. A store whose time is
// not after to is left as it is.
//
// Errors: ErrInvalidOptions (a bad field, ReadOnly, a zero to), and, naming
// the path, fs.ErrNotExist, ErrLocked, ErrNotOncekv, ErrCorrupt. Queues and
// other packages built on the store keep their own times (a message's next
// visible time): RewindClock does not change them.
func RewindClock(path string, to time.Time, opts *Options) (st RewindStats, err error) {
	o, err := opts.withDefaults()
	if err != nil {
		return st, err
	}
	switch {
	case o.ReadOnly:
		return st, fmt.Errorf("%w: ReadOnly: RewindClock writes the file", ErrInvalidOptions)
	case to.IsZero():
		return st, fmt.Errorf("%w: a zero time to rewind to", ErrInvalidOptions)
	}
	if _, err := os.Stat(path); err != nil {
		return st, fmt.Errorf("oncekv: rewind clock of %q: %w", path, err)
	}
	defer recoverCorrupt(path, &err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	began := time.Now()
	b, err := bolt.Open(path, o.FileMode, &bolt.Options{Timeout: o.OpenTimeout, FreelistType: bolt.FreelistArrayType})
	if err != nil {
		return st, openError(path, o.OpenTimeout, time.Since(began), err)
	}
	defer func() { err = errors.Join(err, b.Close()) }()
	if err := b.View(func(tx *bolt.Tx) error {
		fresh, err := layout.Init(tx, 0, 0)
		if err == nil && fresh {
			err = fmt.Errorf("%w: the file holds no oncekv data", ErrNotOncekv)
		}
		return err
	}); err != nil {
		return st, fmt.Errorf("oncekv: rewind clock of %q: %w", path, err)
	}
	if o.WindowSpan, err = fileSpan(b, 0, false); err != nil {
		return st, fmt.Errorf("oncekv: rewind clock of %q: %w", path, err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		st, err = rewindLocked(tx, o.window().Start(to), to.UnixNano())
		return err
	})
	if errors.Is(err, errNotAhead) {
		return st, nil // rolled back: the file is as it was
	}
	if err != nil {
		return RewindStats{}, fmt.Errorf("oncekv: rewind clock of %q: %w", path, err)
	}
	return st, nil
}

// errNotAhead rolls back RewindClock's transaction when the store's time is
// not after the time to rewind to.
var errNotAhead = errors.New("oncekv: the store's time is not ahead")

// rewindLocked is RewindClock's one write transaction: target is the start
// of to's window, to the time in Unix nanoseconds.
func rewindLocked(tx *bolt.Tx, target, to int64) (st RewindStats, err error) {
	exp, err := layout.ReadExpiry(tx)
	if err != nil {
		return st, err
	}
	var below, after []int64 // windows being expired, and windows after target's
	from := exp.ClockHigh
	err = layout.ForEachWindow(tx, false, func(start int64, _ *bolt.Bucket) error {
		from = max(from, start)
		switch {
		case start < exp.Floor:
			below = append(below, start)
		case start > target:
			after = append(after, start)
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	st.From, st.To, st.Windows = time.Unix(0, from), time.Unix(0, to), len(after)
	if to >= from {
		return st, errNotAhead
	}
	if exp.Floor > target {
		// A floor lowered to target must not bring back half-expired windows.
		for _, start := range below {
			if _, _, err := layout.ExpireSome(tx, start, math.MaxInt, nil); err != nil {
				return st, err
			}
		}
	}
	leaseEnd := int64(math.MinInt64)
	for _, start := range after {
		n, end, err := moveWindow(tx, start, target, to)
		if err != nil {
			return st, err
		}
		st.Marks += n.marks
		st.Leases += n.leases
		leaseEnd = max(leaseEnd, end)
	}
	n, err := clampLeases(tx, target, to, leaseEnd)
	if err != nil {
		return st, err
	}
	st.Leases += n
	if err := layout.DeleteFilter(tx, target); err != nil { // it may lack the moved marks
		return st, err
	}
	if err := layout.DropNewestFilter(tx); err != nil {
		return st, err
	}
	return st, layout.WriteExpiry(tx, layout.Expiry{Floor: min(exp.Floor, target), ClockHigh: to})
}

// moved counts what moveWindow changed.
type moved struct{ marks, leases int }

// moveWindow moves every mark of the window starting at start into the
// window starting at target, FirstSeen and leases at most to, and deletes
// the window with its filter and lease end. end is the latest lease end
// among the moved claims, math.MinInt64 for none.
func moveWindow(tx *bolt.Tx, start, target, to int64) (n moved, end int64, err error) {
	end = math.MinInt64
	w := tx.Bucket(layout.WindowName(start))
	var keys [][]byte
	var marks []*layout.Mark
	err = w.ForEach(func(k, v []byte) error {
		found, err := layout.GetMark(w, start, k)
		if err != nil {
			return err
		}
		m := &found.Mark
		m.FirstSeen = min(m.FirstSeen, to)
		if m.State == layout.InProgress {
			if m.LeaseUntil > to {
				m.LeaseUntil = to
				n.leases++
			}
			end = max(end, m.LeaseUntil)
		}
		keys, marks = append(keys, append([]byte(nil), k...)), append(marks, m)
		return nil
	})
	if err != nil {
		return n, end, err
	}
	for i, k := range keys {
		// A key has one mark; were it also in target, the newer wins.
		if _, err := layout.PutMark(tx, target, k, marks[i]); err != nil {
			return n, end, err
		}
		if marks[i].State == layout.Parked { // the index names the mark's window
			p, ok, err := layout.GetParked(tx, k)
			if err == nil && ok {
				p.Window = target
				err = layout.PutParked(tx, k, p)
			}
			if err != nil {
				return n, end, err
			}
		}
		n.marks++
	}
	_, _, err = layout.ExpireSome(tx, start, math.MaxInt, nil)
	return n, end, err
}

// clampLeases ends at to every lease of a claim that ends after it, in the
// windows whose recorded latest lease end is after to, and records target's
// latest lease end as at least moved (the moved claims' latest). It returns
// the number of leases it ended.
func clampLeases(tx *bolt.Tx, target, to, moved int64) (n int, err error) {
	ends := map[int64]int64{}
	if err := layout.ForEachLeaseEnd(tx, func(start, end int64) error {
		ends[start] = end
		return nil
	}); err != nil {
		return 0, err
	}
	for start, end := range ends {
		if end <= to {
			continue
		}
		w := tx.Bucket(layout.WindowName(start))
		if w != nil {
			if n, err = clampWindow(tx, w, start, to, n); err != nil {
				return n, err
			}
		}
		ends[start] = to
		if err := layout.PutLeaseEnd(tx, start, to); err != nil {
			return n, err
		}
	}
	if moved > math.MinInt64 && moved > ends[target] {
		return n, layout.PutLeaseEnd(tx, target, moved)
	}
	return n, nil
}

// clampWindow ends at to the leases after it in the window w starting at
// start, adding their number to n.
func clampWindow(tx *bolt.Tx, w *bolt.Bucket, start, to int64, n int) (int, error) {
	var keys [][]byte
	var marks []*layout.Mark
	err := w.ForEach(func(k, v []byte) error {
		found, err := layout.GetMark(w, start, k)
		if err != nil {
			return err
		}
		if found.State == layout.InProgress && found.LeaseUntil > to {
			found.LeaseUntil = to
			keys, marks = append(keys, append([]byte(nil), k...)), append(marks, &found.Mark)
		}
		return nil
	})
	for i := range keys {
		if err == nil {
			_, err = layout.PutMark(tx, start, keys[i], marks[i])
			n++
		}
	}
	return n, err
}
