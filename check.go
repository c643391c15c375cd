package oncekv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/fencestore"
	"github.com/oncekv/oncekv/internal/layout"
)

// Check verifies the whole file, for an operator after a power cut or a
// disk error, calling fn with each problem until fn returns an error, which
// Check returns: bbolt's structure (each problem wraps ErrCorrupt), then
// every system record (format, span, expiry, marks, tombstones, persisted
// filters, lease ends, parked keys, fences) and every user value's fence header, each problem a
// *RecordError naming bucket and key. It writes nothing, works read-only,
// reads every page in one read transaction, and fn must not call other DB
// methods. A sound file never calls fn.
func (db *DB) Check(fn func(problem error) error) error {
	if !db.life.enter() {
		return ErrClosed
	}
	defer db.life.exit()
	report := func(err error) error { return callUser(func() error { return fn(err) }) }
	return db.guard(func() error {
		return db.bolt.View(func(btx *bolt.Tx) error {
			// Drain bbolt's checker on every way out, so it never outlives the
			// transaction.
			problems := btx.Check()
			defer func() {
				for range problems {
				}
			}()
			for err := range problems {
				if err := report(fmt.Errorf("%w: bbolt: %w", ErrCorrupt, err)); err != nil {
					return err
				}
			}
			for _, check := range []func(*bolt.Tx, func(error) error) error{checkMeta, checkWindows, checkTombs, checkFilters, checkLeases, db.checkParked, checkFences, checkFenceHeaders} {
				if err := check(btx, report); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// checkMeta checks the format, window span and expiry records.
func checkMeta(btx *bolt.Tx, report func(error) error) error {
	if err := layout.Check(btx); err != nil {
		return report(err)
	}
	if _, _, err := layout.ReadSpan(btx); err != nil {
		if err := report(err); err != nil {
			return err
		}
	}
	if _, err := layout.ReadExpiry(btx); err != nil {
		if err := report(err); err != nil {
			return err
		}
	}
	if _, _, err := layout.ReadAdvisor(btx); err != nil {
		return report(err)
	}
	return nil
}

// checkWindows decodes every mark of every window, expired ones still on
// disk included.
func checkWindows(btx *bolt.Tx, report func(error) error) error {
	return layout.ForEachWindow(btx, false, func(start int64, w *bolt.Bucket) error {
		return w.ForEach(func(k, _ []byte) error {
			var err error
			if _, _, ok := layout.SplitMarkKey(k); !ok {
				err = &RecordError{Bucket: windowName(start), Key: fmt.Sprintf("%x", k), Err: errors.New("malformed mark key")}
			} else {
				_, err = layout.GetMark(w, start, k)
			}
			if err != nil {
				return report(err)
			}
			return nil
		})
	})
}

// checkFilters decodes every persisted Bloom filter.
func checkFilters(btx *bolt.Tx, report func(error) error) error {
	decode := func(v []byte) error {
		_, err := bloom.Decode(v)
		return err
	}
	if err := forEachWindowRecord(btx, layout.FiltersRoot, report, decode); err != nil {
		return err
	}
	return layout.CheckNewestFilter(btx, decode, report)
}

// checkTombs decodes every chunk of every tombstone window and checks its
// count.
func checkTombs(btx *bolt.Tx, report func(error) error) error {
	return layout.ForEachTombWindow(btx, func(start int64, b *bolt.Bucket) error {
		n := uint64(0)
		err := layout.ForEachTomb(b, start, func([layout.TombHashSize]byte, *layout.FoundMark) error { n++; return nil }, report)
		if err == nil && n != layout.TombCount(b) {
			err = report(&RecordError{Bucket: string(layout.TombPrefix) + time.Unix(0, start).UTC().Format(time.RFC3339), Key: "sequence",
				Err: fmt.Errorf("it counts %d tombstones, the chunks hold %d", layout.TombCount(b), n)})
		}
		return err
	})
}

// checkParked decodes the parked keys' index, and checks that each entry
// names a PARKED mark of its key.
func (db *DB) checkParked(btx *bolt.Tx, report func(error) error) error {
	n := uint64(0)
	err := layout.ForEachParked(btx, func(mkey []byte, p layout.ParkedEntry) error {
		n++
		if _, err := db.parkedMark(btx, mkey, p); err != nil {
			return report(err)
		}
		return nil
	})
	if err != nil {
		return report(err) // an entry that does not decode ends the walk
	}
	if c := layout.CountParked(btx); c != n {
		return report(&RecordError{Bucket: string(layout.ParkedRoot), Key: "sequence",
			Err: fmt.Errorf("it counts %d keys, the index holds %d", c, n)})
	}
	return nil
}

// checkLeases decodes every window's recorded lease end.
func checkLeases(btx *bolt.Tx, report func(error) error) error {
	return forEachWindowRecord(btx, layout.LeasesRoot, report, func(v []byte) error {
		var l layout.LeaseEnd
		return l.Unmarshal(v)
	})
}

// forEachWindowRecord runs decode on every value of the system bucket name,
// keyed by window start, reporting each failure; a missing bucket is fine.
func forEachWindowRecord(btx *bolt.Tx, name []byte, report func(error) error, decode func(v []byte) error) error {
	b := btx.Bucket(name)
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, v []byte) error {
		key := fmt.Sprintf("%x", k)
		err := errors.New("key is not a window start")
		if len(k) == 8 {
			key = time.Unix(0, int64(binary.BigEndian.Uint64(k)^(1<<63))).UTC().Format(time.RFC3339)
			err = decode(v)
		}
		if err != nil {
			return report(&RecordError{Bucket: string(name), Key: key, Err: err})
		}
		return nil
	})
}

// checkFences decodes every counter and key record of the fences bucket.
func checkFences(btx *bolt.Tx, report func(error) error) error {
	b := btx.Bucket(layout.FencesRoot)
	if b == nil {
		return nil // layout.Check has reported it
	}
	return fencestore.Check(b, func(e *fencestore.RecordError) error {
		name := string(layout.FencesRoot)
		if e.Bucket != nil {
			name += "/" + string(e.Bucket)
		}
		return report(&RecordError{Bucket: name, Key: string(e.Key), Err: e.Err})
	})
}

// checkFenceHeaders decodes the fence header of every user value that has
// one.
func checkFenceHeaders(btx *bolt.Tx, report func(error) error) error {
	return layout.ForEachUserBucket(btx, func(name []byte) error { return base.Buckets.Check(btx, name, report) })
}

// windowName names a window in a problem report by its start.
func windowName(start int64) string {
	return string(layout.WindowPrefix) + time.Unix(0, start).UTC().Format(time.RFC3339)
}
