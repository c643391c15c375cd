// Package oncetest holds test helpers shared by oncekv's test packages: a
// store opened in a temporary directory and checked when the test ends.
package oncetest

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/layout"
)

// Open opens a store in t.TempDir() with opts (nil for defaults) and
// registers a cleanup that closes it and checks the file.
func Open(t testing.TB, opts *oncekv.Options) *oncekv.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.db")
	db, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, db.Close())
		Check(t, path)
	})
	return db
}

// Check verifies a closed store's file: bbolt's own consistency check
// passes, and every mark record decodes. A file that a crash or an I/O
// error left before it was ever initialised (empty, or a bbolt file with no
// bucket yet) passes: Open initialises it as a new store.
func Check(t testing.TB, path string) {
	t.Helper()
	if st, err := os.Stat(path); err == nil && st.Size() == 0 {
		return // bbolt wrote nothing yet; a read-only open cannot initialise it
	}
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.View(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() { // drain: bbolt's checker goroutine writes every error
			errs = append(errs, err)
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		if k, _ := tx.Cursor().First(); k == nil {
			return nil // no bucket at all: Open makes it a new store
		}
		if err := layout.Check(tx); err != nil {
			return err
		}
		return layout.ForEachWindow(tx, false, func(_ int64, w *bolt.Bucket) error {
			return w.ForEach(func(k, v []byte) error {
				var m layout.Mark
				return m.Unmarshal(v)
			})
		})
	}))
}

// Clock is a fake clock for Options.Now, safe for concurrent use. Tests move
// it explicitly; none of them sleeps.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock stopped at start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time; pass the method value as Options.Now.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d, which may be negative to model a clock that
// jumps backwards.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
