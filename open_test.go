package oncekv_test

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// hangBound is how long these tests wait for a call that must not block
// behind a reader. It is generous, so a loaded machine never fails them;
// it only turns a hang into a failure instead of a wedged test binary.
const hangBound = time.Minute

// putBig is an Apply effect that writes n bytes, enough to grow the file.
func putBig(key string, n int) func(tx *oncekv.Tx) ([]byte, error) {
	return func(tx *oncekv.Tx) ([]byte, error) {
		b, err := tx.CreateBucketIfNotExists([]byte("big"))
		if err != nil {
			return nil, err
		}
		return []byte(key), b.Put([]byte(key), bytes.Repeat([]byte{'x'}, n))
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	return st.Size()
}

// holdView opens a View in another goroutine and returns once it is open;
// closing release ends it, and viewDone then carries View's error.
func holdView(db *oncekv.DB) (release chan struct{}, viewDone chan error) {
	inView, release, viewDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		viewDone <- db.View(func(*oncekv.Tx) error {
			close(inView)
			<-release
			return nil
		})
	}()
	<-inView
	return release, viewDone
}

// applyBig starts an Apply that writes n bytes in another goroutine; the
// channel carries its error.
func applyBig(db *oncekv.DB, n int) chan error {
	applied := make(chan error, 1)
	go func() {
		_, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "big"}, putBig("big", n))
		applied <- err
	}()
	return applied
}

// TestViewDoesNotBlockGrowingWriter: with the default InitialMmapSize, an
// Apply whose commit grows the file completes while a View is open. Before
// the option, bbolt's map of a new file was 32 KiB, and that commit waited
// for the View to end.
func TestViewDoesNotBlockGrowingWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "grow.db")
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	before := fileSize(t, path)

	release, viewDone := holdView(db)
	applied := applyBig(db, 24<<20)
	select {
	case err := <-applied:
		require.NoError(t, err)
	case <-time.After(hangBound):
		close(release) // let the writer finish, so the deferred Close does not hang too
		t.Fatalf("an Apply that grows the file was still blocked by an open View after %v", hangBound)
	}
	close(release)
	require.NoError(t, <-viewDone)
	require.Greater(t, fileSize(t, path), before+8<<20, "the commit did grow the file")
}

// TestViewBlocksWriterPastInitialMmap pins down the documented limit: a
// commit that grows the file past the map waits for the open View, and
// completes once it ends.
func TestViewBlocksWriterPastInitialMmap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "past.db")
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true, InitialMmapSize: 1 << 20})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()

	release, viewDone := holdView(db)
	applied := applyBig(db, 4<<20)
	// While the View is open the writer cannot finish; this can only fail
	// if it did, never because the machine is slow.
	select {
	case err := <-applied:
		close(release)
		t.Fatalf("a commit past the 1 MiB map finished while a View was open (err %v): the documented limit is wrong", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-viewDone)
	select {
	case err := <-applied:
		require.NoError(t, err)
	case <-time.After(hangBound):
		t.Fatalf("the writer did not finish within %v after the View ended", hangBound)
	}
}

// TestApplyInsideViewOnFreshFile: Apply called from inside View's function
// on a new file works while the file fits the map (before the option it
// deadlocked: the commit's remap waited for the View around it). On a
// deadlock the DB is left open, since Close would wait for it too.
func TestApplyInsideViewOnFreshFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inside.db")
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	req := oncekv.Request{Handler: "h", Key: "inside"}
	done := make(chan error, 1)
	var res oncekv.Result
	go func() {
		done <- db.View(func(*oncekv.Tx) error {
			var err error
			res, err = db.Apply(context.Background(), req, putBig("inside", 4<<20))
			return err
		})
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(hangBound):
		t.Fatalf("Apply inside View on a fresh file deadlocked (still waiting after %v)", hangBound)
	}
	require.False(t, res.Duplicate)
	require.Equal(t, "inside", string(res.Response))
	again, err := db.Apply(context.Background(), req, nil)
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.NoError(t, db.Close())
}

func TestInitialMmapSizeOption(t *testing.T) {
	path := filepath.Join(t.TempDir(), "opt.db")
	_, err := oncekv.Open(path, &oncekv.Options{InitialMmapSize: math.MaxInt})
	require.ErrorIs(t, err, oncekv.ErrInvalidOptions)
	require.Contains(t, err.Error(), "InitialMmapSize")
	require.NoFileExists(t, path, "invalid options must not create the file")

	// Negative: bbolt's own growth. Everything still works, and the file
	// is no bigger than its data needs.
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true, InitialMmapSize: -1})
	require.NoError(t, err)
	_, err = db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, putBig("k", 100<<10))
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.Less(t, fileSize(t, path), int64(1<<20))

	// The default maps far more than the file holds, without writing it.
	db, err = oncekv.Open(path, nil)
	require.NoError(t, err)
	res, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, nil)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.NoError(t, db.Close())
	require.Less(t, fileSize(t, path), int64(1<<20), "opening with a large map leaves the file as it was")
}

// procStatusKiB reads a "VmRSS:"-style field of /proc/self/status in KiB.
func procStatusKiB(b *testing.B, field string) float64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status here")
	}
	for line := range strings.Lines(string(raw)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("no %s in /proc/self/status", field)
	return 0
}

var mmapSizes = []struct {
	name string
	size int
}{{"bbolt-default", -1}, {"64MiB", 64 << 20}, {"256MiB", 256 << 20}, {"1GiB", 1 << 30}}

// BenchmarkOpenInitialMmapSize measures what InitialMmapSize costs: per
// Open of a new store, one Apply of 1 KiB and one of 4 MiB, and Close
// (ns/op), the address space (VmSize) and resident memory (VmRSS) it adds
// while open, and the file's length and the disk blocks it takes after.
//
//	go test -run '^$' -bench BenchmarkOpenInitialMmapSize -benchtime 20x .
func BenchmarkOpenInitialMmapSize(b *testing.B) {
	for _, c := range mmapSizes {
		b.Run(c.name, func(b *testing.B) {
			var vm, rss, length, disk float64
			for i := range b.N {
				path := filepath.Join(b.TempDir(), strconv.Itoa(i)+".db")
				vm0, rss0 := procStatusKiB(b, "VmSize"), procStatusKiB(b, "VmRSS")
				db, err := oncekv.Open(path, &oncekv.Options{NoSync: true, InitialMmapSize: c.size, ExpireInterval: -1})
				if err != nil {
					b.Fatal(err)
				}
				for k, n := range map[string]int{"small": 1 << 10, "big": 4 << 20} {
					if _, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: k}, putBig(k, n)); err != nil {
						b.Fatal(err)
					}
				}
				vm += procStatusKiB(b, "VmSize") - vm0
				rss += procStatusKiB(b, "VmRSS") - rss0
				if err := db.Close(); err != nil {
					b.Fatal(err)
				}
				st, err := os.Stat(path)
				if err != nil {
					b.Fatal(err)
				}
				length += float64(st.Size())
				disk += float64(diskBytes(st))
			}
			n := float64(b.N)
			b.ReportMetric(vm/n/1024, "VmSize-MiB")
			b.ReportMetric(rss/n/1024, "VmRSS-MiB")
			b.ReportMetric(length/n/(1<<20), "file-MiB")
			b.ReportMetric(disk/n/(1<<20), "disk-MiB")
		})
	}
}

// BenchmarkApplyBehindView: how long an Apply that grows a new store's
// file waits while another goroutine holds a View open for hold. Without a
// large enough map the wait is about hold; within it, the Apply's own time.
//
//	go test -run '^$' -bench BenchmarkApplyBehindView -benchtime 3x .
func BenchmarkApplyBehindView(b *testing.B) {
	const hold = time.Second
	for _, c := range []struct {
		name string
		size int
	}{{"bbolt-default", -1}, {"default", 0}} {
		b.Run(c.name, func(b *testing.B) {
			var waited time.Duration
			for i := range b.N {
				db, err := oncekv.Open(filepath.Join(b.TempDir(), strconv.Itoa(i)+".db"),
					&oncekv.Options{NoSync: true, InitialMmapSize: c.size, ExpireInterval: -1})
				if err != nil {
					b.Fatal(err)
				}
				inView, viewDone := make(chan struct{}), make(chan error, 1)
				go func() {
					viewDone <- db.View(func(*oncekv.Tx) error {
						close(inView)
						time.Sleep(hold) // the long reader being measured
						return nil
					})
				}()
				<-inView
				began := time.Now()
				if _, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, putBig("k", 4<<20)); err != nil {
					b.Fatal(err)
				}
				waited += time.Since(began)
				if err := <-viewDone; err != nil {
					b.Fatal(err)
				}
				if err := db.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(waited.Milliseconds())/float64(b.N), "apply-ms")
		})
	}
}
