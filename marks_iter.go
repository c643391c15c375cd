package oncekv

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/layout"
)

// MarkFilter selects the marks DB.Marks lists. A zero field selects every
// mark, so the zero MarkFilter lists them all.
type MarkFilter struct {
	// Handler, when set, keeps the marks of this handler only. Mark keys
	// begin with their handler, so this reads only that handler's keys.
	Handler string
	// State, when set, keeps the marks in this state only.
	State MarkState
	// Window, when set, keeps the marks of the window starting at this
	// instant only (MarkInfo.Window, WindowStats.Start).
	Window time.Time
}

// Marks calls fn with every mark in the live windows that filter selects,
// oldest window first and in key order within a window, until fn returns
// an error, which Marks returns. Like Claims it is for operators and tools
// (listing, dumping), not a hot path: fn runs inside one read transaction,
// which holds bbolt's memory map while it runs, and must not call other DB
// methods.
//
// Errors: ErrKeyTooLarge for a filter handler that no mark key could hold;
// ErrCorrupt (a *RecordError naming bucket and key) for a mark that does
// not decode; ErrClosed after Close.
func (db *DB) Marks(filter MarkFilter, fn func(MarkInfo) error) error {
	if !db.life.enter() {
		return ErrClosed
	}
	defer db.life.exit()
	var prefix []byte
	if filter.Handler != "" {
		if err := layout.CheckMarkKey(filter.Handler, ""); err != nil {
			return fmt.Errorf("oncekv: marks: %w", err)
		}
		prefix = layout.MarkKey(filter.Handler, "")
	}
	floor := db.windows.Floor()
	return db.guard(func() error {
		return db.bolt.View(func(btx *bolt.Tx) error {
			return layout.ForEachWindow(btx, false, func(start int64, w *bolt.Bucket) error {
				if start < floor || (!filter.Window.IsZero() && start != filter.Window.UnixNano()) {
					return nil // expired (being deleted), or not asked for
				}
				return db.windowMarks(w, start, prefix, filter.State, fn)
			})
		})
	})
}

// windowMarks calls fn with the marks of window w whose key begins with
// prefix and whose state is state (any state when 0).
func (db *DB) windowMarks(w *bolt.Bucket, start int64, prefix []byte, state MarkState, fn func(MarkInfo) error) error {
	c := w.Cursor()
	k, _ := c.First()
	if prefix != nil {
		k, _ = c.Seek(prefix)
	}
	for ; k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		m, err := layout.GetMark(w, start, k)
		if err != nil {
			return err
		}
		if state != 0 && MarkState(m.State) != state {
			continue
		}
		handler, key, ok := layout.SplitMarkKey(k)
		if !ok {
			return &RecordError{Bucket: fmt.Sprintf("window %v", time.Unix(0, start).UTC()), Key: fmt.Sprintf("%x", k), Err: errors.New("malformed mark key")}
		}
		info := db.markInfo(handler, key, k, db.releaseOrphan(m))
		if err := callUser(func() error { return fn(info) }); err != nil {
			return err
		}
	}
	return nil
}
