package oncekv_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// smallDisk mounts a tmpfs of size on a temporary directory and returns it,
// or skips the test where mounting is not permitted.
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("mounts a file system")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a %s tmpfs here (%v: %s): skipping the real full-disk test", size, err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		// Lazy, so that a failed test holding the file open still unmounts.
		out, err := exec.Command("umount", "-l", dir).CombinedOutput()
		require.NoError(t, err, "umount %s: %s", dir, out)
	})
	return dir
}

// TestFullDisk fills a real 2 MiB file system until commits fail, and
// checks: the failure is ErrNoSpace, wrapping syscall.ENOSPC, and applies
// nothing; reads and duplicates are still answered; the store is not
// poisoned, so writes resume, without a reopen, once space is freed; and
// the file passes the checks after all that.
func TestFullDisk(t *testing.T) {
	dir := smallDisk(t, "2m")
	// Ballast takes most of the space, so that freeing it later is easy.
	ballast := filepath.Join(dir, "ballast")
	require.NoError(t, os.WriteFile(ballast, make([]byte, 1<<20), 0o600))
	path := filepath.Join(dir, "full.db")
	db, err := oncekv.Open(path, &oncekv.Options{ExpireInterval: -1})
	require.NoError(t, err)
	ctx := context.Background()

	value := bytes.Repeat([]byte("v"), 16<<10)
	put := func(i int) (oncekv.Result, error) {
		key := fmt.Sprint("fill-", i)
		return db.Apply(ctx, oncekv.Request{Handler: "fill", Key: key}, func(tx *oncekv.Tx) ([]byte, error) {
			b, err := tx.CreateBucketIfNotExists([]byte("fill"))
			if err != nil {
				return nil, err
			}
			return []byte(key), b.Put([]byte(key), value)
		})
	}
	acked := 0
	for ; ; acked++ {
		_, err = put(acked)
		if err != nil {
			break
		}
		require.Less(t, acked, 200, "2 MiB never filled up")
	}
	require.Positive(t, acked)
	require.ErrorIs(t, err, oncekv.ErrNoSpace)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.NotErrorIs(t, err, oncekv.ErrPoisoned)
	t.Logf("disk full after %d applies: %v", acked, err)

	// The failed request applied nothing; reads and duplicates still work.
	full := acked
	res, err := put(0)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		require.Equal(t, value, tx.Bucket([]byte("fill")).Get([]byte("fill-0")))
		require.Nil(t, tx.Bucket([]byte("fill")).Get([]byte(fmt.Sprint("fill-", full))))
		return nil
	}))
	// Still full: the same clear error, still not poisoned. Or, as a stress
	// run saw once, the retry fits: bbolt may place its pages differently
	// the second time (in pages freed since, or in blocks the failed
	// attempt's writes already took).
	if _, err = put(full); err != nil {
		require.ErrorIs(t, err, oncekv.ErrNoSpace)
		require.NotErrorIs(t, err, oncekv.ErrPoisoned)
	}

	// Space freed: writes resume without a reopen.
	require.NoError(t, os.Remove(ballast))
	for i := full; i < full+20; i++ {
		_, err := put(i)
		require.NoError(t, err, "apply %d after freeing space", i)
	}
	require.NoError(t, db.Close())
	oncetest.Check(t, path)

	db, err = oncekv.Open(path, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	for i := range full + 20 {
		res, err := put(i)
		require.NoError(t, err)
		require.True(t, res.Duplicate, "fill-%d", i)
		require.Equal(t, fmt.Sprint("fill-", i), string(res.Response))
	}
}
