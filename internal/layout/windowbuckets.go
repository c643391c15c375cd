package layout

import (
	"bytes"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/base"
)

// FoundMark is a mark read from the file, with the window it lives in.
type FoundMark struct {
	Mark
	Window int64 // start of its window, Unix nanoseconds
	// Tombstone: the mark is a tombstone's (see tombstones.go): State and
	// an approximate FirstSeen only, no fingerprint, no response.
	Tombstone bool
}

// FindMark looks for the mark of mkey (see [MarkKey]) in every window that
// starts at or after floor, newest first, since a retry usually comes soon
// after the first delivery. It returns nil when there is none. The mark is
// decoded into fresh memory, so it outlives the transaction.
func FindMark(tx *bolt.Tx, mkey []byte, floor int64) (*FoundMark, error) {
	var found *FoundMark
	err := ForEachWindow(tx, true, func(start int64, w *bolt.Bucket) error {
		if start < floor {
			return errStop
		}
		m, err := GetMark(w, start, mkey)
		if m != nil || err != nil {
			found = m
			return errOrStop(err)
		}
		return nil
	})
	if err == errStop {
		err = nil
	}
	return found, err
}

// GetMark reads the mark of mkey from the window bucket w starting at start,
// or returns nil.
func GetMark(w *bolt.Bucket, start int64, mkey []byte) (*FoundMark, error) {
	raw := w.Get(mkey)
	if raw == nil {
		return nil, nil
	}
	found := &FoundMark{Window: start}
	if err := found.Unmarshal(raw); err != nil {
		return nil, markError(start, mkey, err)
	}
	return found, nil
}

func errOrStop(err error) error {
	if err != nil {
		return err
	}
	return errStop
}

// windowsEnd is the first root name after every window bucket name.
var windowsEnd = append(bytes.Clone(WindowPrefix[:len(WindowPrefix)-1]), WindowPrefix[len(WindowPrefix)-1]+1)

// ForEachWindow calls fn for every window bucket, newest first when
// newestFirst is set, oldest first otherwise, until fn returns an error.
func ForEachWindow(tx *bolt.Tx, newestFirst bool, fn func(start int64, w *bolt.Bucket) error) error {
	c := tx.Cursor()
	var name, v []byte
	if newestFirst {
		name, _ = c.Seek(windowsEnd)
		if name == nil {
			name, v = c.Last()
		} else {
			name, v = c.Prev()
		}
	} else {
		name, v = c.Seek(WindowPrefix)
	}
	for ; name != nil && bytes.HasPrefix(name, WindowPrefix); name, v = step(c, newestFirst) {
		start, ok := ParseWindowName(name)
		if !ok || v != nil {
			return fmt.Errorf("%w: stray root entry %q among the windows", base.ErrCorrupt, name)
		}
		if err := fn(start, tx.Bucket(name)); err != nil {
			return err
		}
	}
	return nil
}

func step(c *bolt.Cursor, backwards bool) ([]byte, []byte) {
	if backwards {
		return c.Prev()
	}
	return c.Next()
}

// PutMark writes m as the mark of mkey in the window starting at start,
// creating the window bucket when it is the window's first mark. It reports
// whether the mark is new in the window (rather than a rewrite of one, as
// when a claim completes).
//
// The window bucket's sequence counts its marks. The sequence sits in the
// bucket's header in the root page, which this write dirties anyway, so the
// count costs no extra page and lets Open learn every window's size
// without walking its pages.
//
// It also sets how full bbolt packs the window's pages when the
// transaction commits (see base.AppendFill): full when the transaction
// only appends to the window, as with keys that grow.
func PutMark(tx *bolt.Tx, start int64, mkey []byte, m *Mark) (fresh bool, err error) {
	w, err := tx.CreateBucketIfNotExists(WindowName(start))
	if err != nil {
		return false, fmt.Errorf("oncekv: create window bucket: %w", base.MapBoltErr(err))
	}
	// One seek, as Get would do, tells a new key from a rewrite and an
	// append (nothing after it) from an insert between keys.
	k, _ := w.Cursor().Seek(mkey)
	fresh = !bytes.Equal(k, mkey)
	base.SetFill(w, k == nil)
	if fresh {
		if err := w.SetSequence(w.Sequence() + 1); err != nil {
			return false, base.MapBoltErr(err)
		}
	}
	// mkey is freshly built per request and not reused, so bbolt may keep it.
	return fresh, base.MapBoltErr(w.Put(mkey, m.Marshal()))
}

// DeleteMark removes the mark of mkey from the window starting at start. It
// reports whether there was one.
func DeleteMark(tx *bolt.Tx, start int64, mkey []byte) (bool, error) {
	w := tx.Bucket(WindowName(start))
	if w == nil || w.Get(mkey) == nil {
		return false, nil
	}
	if err := w.SetSequence(w.Sequence() - 1); err != nil {
		return false, base.MapBoltErr(err)
	}
	return true, base.MapBoltErr(w.Delete(mkey))
}

// WindowMarks returns the number of marks in a window bucket.
func WindowMarks(w *bolt.Bucket) uint64 { return w.Sequence() }

// ExpireSome deletes up to max marks of the window starting at start, and
// the window bucket and its persisted filter once it is empty, calling
// onKey (if not nil) with each mark key deleted. Deleting in bounded
// steps, each its own transaction, keeps any one step short, so writers
// never wait long behind expiry whatever the size of the window.
func ExpireSome(tx *bolt.Tx, start int64, max int, onKey func(mkey []byte)) (deleted int, gone bool, err error) {
	name := WindowName(start)
	w := tx.Bucket(name)
	if w != nil {
		keys := make([][]byte, 0, min(max, 4096))
		c := w.Cursor()
		for k, _ := c.First(); k != nil && len(keys) < max; k, _ = c.Next() {
			keys = append(keys, bytes.Clone(k))
			if onKey != nil {
				onKey(k)
			}
		}
		for _, k := range keys {
			if err := w.Delete(k); err != nil {
				return deleted, false, base.MapBoltErr(err)
			}
			deleted++
		}
		if k, _ := w.Cursor().First(); k != nil {
			if err := w.SetSequence(w.Sequence() - uint64(min(uint64(deleted), w.Sequence()))); err != nil {
				return deleted, false, base.MapBoltErr(err)
			}
			return deleted, false, nil
		}
		if err := tx.DeleteBucket(name); err != nil {
			return deleted, false, base.MapBoltErr(err)
		}
	}
	if err := deleteLeaseEnd(tx, start); err != nil {
		return deleted, false, err
	}
	return deleted, true, DeleteFilter(tx, start)
}

func markError(start int64, mkey []byte, err error) error {
	name := fmt.Sprintf("%s%s", WindowPrefix, time.Unix(0, start).UTC().Format(time.RFC3339))
	key := fmt.Sprintf("%x", mkey)
	if h, k, ok := SplitMarkKey(mkey); ok {
		key = h + "/" + k
	}
	return &base.RecordError{Bucket: name, Key: key, Err: err}
}

// DecodeMark decodes raw, the mark of mkey as read from the window bucket
// starting at start, into m: GetMark for a caller that read the value
// itself and keeps the mark where it likes.
func DecodeMark(raw []byte, start int64, mkey []byte, m *FoundMark) error {
	*m = FoundMark{Window: start}
	if err := m.Unmarshal(raw); err != nil {
		return markError(start, bytes.Clone(mkey), err) // a copy: mkey may stay on the caller's stack
	}
	return nil
}
