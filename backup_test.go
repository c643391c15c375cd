package oncekv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// TestBackupWhileWriting takes a backup while 4 writers apply increments,
// and opens the copy: it holds every key acknowledged before the backup
// began, and its counter equals its number of marks, so it caught each
// commit whole (effect and mark) or not at all.
func TestBackupWhileWriting(t *testing.T) {
	dir := t.TempDir()
	db, err := oncekv.Open(filepath.Join(dir, "live.db"), &oncekv.Options{NoSync: true, ExpireInterval: -1})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()

	var next atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				i := next.Add(1) - 1
				if _, err := db.Apply(context.Background(), oncekv.Request{Handler: "inc", Key: fmt.Sprint("k", i)}, deposit("counter", 1)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// Let the writers get going, then note what is acknowledged.
	for balance(t, db, "counter") < 200 {
	}
	ackedBefore := balance(t, db, "counter")
	copyPath := filepath.Join(dir, "copy.db")
	n, err := db.BackupFile(copyPath)
	require.NoError(t, err)
	for balance(t, db, "counter") < ackedBefore+200 { // writers ran on during and after it
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	st, err := os.Stat(copyPath)
	require.NoError(t, err)
	require.Equal(t, n, st.Size())
	matches, err := filepath.Glob(filepath.Join(dir, "copy.db.tmp-*"))
	require.NoError(t, err)
	require.Empty(t, matches, "no temporary file left")

	copied, err := oncekv.Open(copyPath, &oncekv.Options{ExpireInterval: -1})
	require.NoError(t, err)
	marks := uint64(0)
	for i := range next.Load() {
		_, err := copied.Mark("inc", fmt.Sprint("k", i))
		if errors.Is(err, oncekv.ErrNotFound) {
			continue
		}
		require.NoError(t, err)
		marks++
	}
	require.Equal(t, marks, balance(t, copied, "counter"), "each commit whole or not at all")
	require.GreaterOrEqual(t, marks, ackedBefore, "everything acknowledged before the backup is in it")
	require.Less(t, marks, uint64(next.Load()), "writers ran on after the snapshot")
	// The copy is a working store: a duplicate is a duplicate.
	res, err := copied.Apply(context.Background(), oncekv.Request{Handler: "inc", Key: "k0"}, mustNotApply(t))
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.NoError(t, copied.Close())
	oncetest.Check(t, copyPath)
}

func TestBackupToWriter(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	_, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, nil)
	require.NoError(t, err)
	var buf bytes.Buffer
	n, err := db.Backup(&buf)
	require.NoError(t, err)
	require.Equal(t, int64(buf.Len()), n)
	path := filepath.Join(t.TempDir(), "restored.db")
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o600))
	restored, err := oncekv.Open(path, nil)
	require.NoError(t, err)
	info, err := restored.Mark("h", "k")
	require.NoError(t, err)
	require.Equal(t, oncekv.MarkDone, info.State)
	require.NoError(t, restored.Close())

	// The writer's error comes back; its panic is the caller's.
	boom := errors.New("disk full")
	_, err = db.Backup(failingWriter{boom})
	require.ErrorIs(t, err, boom)
	require.PanicsWithValue(t, "writer panic", func() { _, _ = db.Backup(panickingWriter{}) })

	// Never over the store's own file.
	_, err = db.BackupFile(db.Path())
	require.ErrorIs(t, err, fs.ErrExist)
	require.Contains(t, err.Error(), "own file")

	// A failed BackupFile leaves nothing behind.
	dir := t.TempDir()
	require.NoError(t, db.Close())
	_, err = db.BackupFile(filepath.Join(dir, "b.db"))
	require.ErrorIs(t, err, oncekv.ErrClosed)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
}

type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }

type panickingWriter struct{}

func (panickingWriter) Write([]byte) (int, error) { panic("writer panic") }
