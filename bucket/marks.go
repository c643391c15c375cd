package bucket

import (
	"bytes"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// FoundMark is a mark read from the file, with the window it lives in.
type FoundMark struct {
	Mark
	Window int64 // start of its window, Unix nanoseconds
}

// FindMark looks for the mark of mkey (see [MarkKey]) in every window,
// newest first, since a retry usually comes soon after the first delivery.
// It returns nil when there is none. The mark is decoded into fresh memory,
// so it outlives the transaction.
func FindMark(tx *bolt.Tx, mkey []byte) (*FoundMark, error) {
	var found *FoundMark
	err := ForEachWindow(tx, true, func(start int64, w *bolt.Bucket) error {
		raw := w.Get(mkey)
		if raw == nil {
			return nil
		}
		found = &FoundMark{Window: start}
		if err := found.Unmarshal(raw); err != nil {
			return markError(start, mkey, err)
		}
		return errStop
	})
	if err == errStop {
		err = nil
	}
	return found, err
}

// windowsEnd is the first root name after every window bucket name.
var windowsEnd = append(bytes.Clone(WindowPrefix[:len(WindowPrefix)-1]), WindowPrefix[len(WindowPrefix)-1]+1)

// ForEachWindow calls fn for every window bucket, newest first when
// newestFirst is set, oldest first otherwise, until fn returns an error.
func ForEachWindow(tx *bolt.Tx, newestFirst bool, fn func(start int64, w *bolt.Bucket) error) error {
	c := tx.Cursor()
	var name, v []byte
	if newestFirst {
		name, v = c.Seek(windowsEnd)
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
			return fmt.Errorf("%w: stray root entry %q among the windows", ErrCorrupt, name)
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
// creating the window bucket when it is the window's first mark.
func PutMark(tx *bolt.Tx, start int64, mkey []byte, m *Mark) error {
	w, err := tx.CreateBucketIfNotExists(WindowName(start))
	if err != nil {
		return fmt.Errorf("oncekv: create window bucket: %w", mapBoltErr(err))
	}
	// mkey is freshly built per request and not reused, so bbolt may keep it.
	return mapBoltErr(w.Put(mkey, m.Marshal()))
}

func markError(start int64, mkey []byte, err error) error {
	name := fmt.Sprintf("%s%s", WindowPrefix, time.Unix(0, start).UTC().Format(time.RFC3339))
	key := fmt.Sprintf("%x", mkey)
	if h, k, ok := SplitMarkKey(mkey); ok {
		key = h + "/" + k
	}
	return &RecordError{Bucket: name, Key: key, Err: err}
}
