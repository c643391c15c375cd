package oncekv_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// openBenchEpoch is the injected time every open benchmark store is built
// and opened at, so that a store built once can be reopened by another
// build of the benchmark (a before/after comparison) with nothing expired.
var openBenchEpoch = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// openBenchWindows is how many windows the "spread" stores use.
const openBenchWindows = 10

// BenchmarkOpenLiveMarks times Open of a store holding many live marks, after a
// clean Close ("clean") and after a commit that Close did not follow
// ("crash", made by committing to the file with bbolt directly, see
// commitBehind: what a process killed after writing leaves, as far as
// Open's proof can tell), with every
// mark in one window ("one") or spread over openBenchWindows windows.
//
// close-after-write times the Close that follows one new mark: it writes
// the newest window's filter.
//
// Sizes come from ONCEKV_OPEN_MARKS (comma separated, default 100000), so
// that the 1M and 10M stores, which take minutes to build and gigabytes of
// disk, are made only on demand. ONCEKV_OPEN_DIR keeps the stores between
// runs (and between builds, for a before/after comparison); by default
// they go in a temporary directory.
func BenchmarkOpenLiveMarks(b *testing.B) {
	sizes := []int{100_000}
	if s := os.Getenv("ONCEKV_OPEN_MARKS"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			require.NoError(b, err, "ONCEKV_OPEN_MARKS")
			sizes = append(sizes, n)
		}
	}
	dir := os.Getenv("ONCEKV_OPEN_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	for _, marks := range sizes {
		for _, spread := range []bool{false, true} {
			layout := "one"
			windows := 1
			if spread {
				layout, windows = "spread", openBenchWindows
			}
			path := filepath.Join(dir, "open-"+layout+"-"+strconv.Itoa(marks)+".db")
			for _, crash := range []bool{false, true} {
				name := "clean"
				if crash {
					name = "crash"
				}
				b.Run(name+"/"+layout+"/"+strconv.Itoa(marks), func(b *testing.B) {
					buildOpenBenchStore(b, path, marks, windows)
					opts := openBenchOptions(windows)
					if !crash {
						// One open and Close first: a store last written by
						// another build, or by the crash case, is then
						// closed cleanly by this one.
						db, err := oncekv.Open(path, opts)
						require.NoError(b, err)
						require.NoError(b, db.Close())
					}
					var cpu cpuMeter
					b.ResetTimer()
					for range b.N {
						if crash {
							b.StopTimer()
							commitBehind(b, path)
							b.StartTimer()
						}
						cpu.start()
						db, err := oncekv.Open(path, opts)
						cpu.stop()
						require.NoError(b, err)
						b.StopTimer()
						require.NoError(b, db.Close())
						b.StartTimer()
					}
					cpu.report(b)
				})
			}
			b.Run("close-after-write/"+layout+"/"+strconv.Itoa(marks), func(b *testing.B) {
				opts := openBenchOptions(windows)
				var cpu cpuMeter
				b.StopTimer()
				for range b.N {
					db, err := oncekv.Open(path, opts)
					require.NoError(b, err)
					require.Equal(b, 1, applyKeys(b, db, "close-"+strconv.FormatInt(time.Now().UnixNano(), 36)+"-", 1, 1))
					b.StartTimer()
					cpu.start()
					err = db.Close()
					cpu.stop()
					b.StopTimer()
					require.NoError(b, err)
				}
				cpu.report(b)
			})
		}
	}
}

// cpuMeter adds up the CPU time the process uses between start and stop.
type cpuMeter struct{ total, began time.Duration }

func (m *cpuMeter) start() { m.began = cpuTime() }
func (m *cpuMeter) stop()  { m.total += cpuTime() - m.began }

// report adds the CPU time per operation to b's results, as cpu-ms/op.
func (m *cpuMeter) report(b *testing.B) {
	if haveCPUTime {
		b.ReportMetric(float64(m.total.Microseconds())/1000/float64(b.N), "cpu-ms/op")
	}
}

func openBenchOptions(windows int) *oncekv.Options {
	now := oncetest.NewClock(openBenchEpoch.Add(time.Duration(windows-1) * time.Hour))
	return &oncekv.Options{Now: now.Now, NoSync: true, ExpireInterval: -1}
}

// buildOpenBenchStore fills path, unless it exists, with marks unique marks
// spread evenly over windows one-hour windows, in batches, sync off, and
// closes it cleanly.
func buildOpenBenchStore(b *testing.B, path string, marks, windows int) {
	if _, err := os.Stat(path); err == nil {
		return
	}
	clock := oncetest.NewClock(openBenchEpoch)
	db, err := oncekv.Open(path+".part", &oncekv.Options{Now: clock.Now, NoSync: true, ExpireInterval: -1})
	require.NoError(b, err)
	const batch = 10_000
	reqs := make([]oncekv.Request, 0, batch)
	perWindow := (marks + windows - 1) / windows
	for i := 0; i < marks; {
		if i > 0 && i%perWindow == 0 {
			clock.Advance(time.Hour)
		}
		n := min(batch, marks-i, perWindow-i%perWindow)
		reqs = reqs[:0]
		for j := range n {
			reqs = append(reqs, oncekv.Request{Handler: "h", Key: "key-" + strconv.Itoa(i+j)})
		}
		res, err := db.ApplyBatch(context.Background(), reqs, nil)
		require.NoError(b, err)
		require.NoError(b, res[0].Err)
		i += n
	}
	require.NoError(b, db.Close())
	require.NoError(b, os.Rename(path+".part", path))
}

// applyKeys applies prefix0 ... prefix<n-1> from workers goroutines and
// returns how many effects ran.
func applyKeys(t testing.TB, db *oncekv.DB, prefix string, n, workers int) int {
	t.Helper()
	var ran atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				key := prefix + strconv.Itoa(i)
				_, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: key, Payload: []byte(key)},
					func(*oncekv.Tx) ([]byte, error) { ran.Add(1); return []byte(key), nil })
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return int(ran.Load())
}

// commitBehind commits a transaction that writes no mark (one user-bucket
// key) to the closed store at path, with bbolt itself. The persisted filter
// would still hold every mark, but the proof is the transaction id, and it
// moved: Open rebuilds, on the safe side.
func commitBehind(tb testing.TB, path string) {
	tb.Helper()
	updateBolt(tb, path, func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists([]byte("u/behind"))
		if err != nil {
			return err
		}
		return bk.Put([]byte("k"), []byte(strconv.Itoa(tx.ID())))
	})
}

// updateBolt commits fn to the closed store at path with bbolt itself.
func updateBolt(tb testing.TB, path string, fn func(tx *bolt.Tx) error) {
	tb.Helper()
	b, err := bolt.Open(path, 0o600, nil)
	require.NoError(tb, err)
	require.NoError(tb, b.Update(fn))
	require.NoError(tb, b.Close())
}

// BenchmarkOpen reopens a store of benchMarks live marks spread over 24
// windows, with the sealed windows' filters persisted (only the newest is
// rebuilt from its keys) and with them removed (every window rebuilt). Run
// it with -benchtime 3x or so.
func BenchmarkOpen(b *testing.B) {
	n := benchMarks(b)
	clock := oncetest.NewClock(epoch)
	opts := &oncekv.Options{NoSync: true, Now: clock.Now, ExpireInterval: -1}
	path := filepath.Join(b.TempDir(), "x.db")
	db, err := oncekv.Open(path, opts)
	if err != nil {
		b.Fatal(err)
	}
	fill(b, db, clock, n, 24, time.Hour)
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	bare := filepath.Join(b.TempDir(), "bare.db")
	copyWithoutFilters(b, path, bare)

	for _, tc := range []struct{ name, path string }{{"persisted-filters", path}, {"rebuild-all", bare}} {
		b.Run(fmt.Sprintf("marks=%d/%s", n, tc.name), func(b *testing.B) {
			for b.Loop() {
				db, err := oncekv.Open(tc.path, opts)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if got := db.Stats().LiveMarks; got != uint64(n) {
					b.Fatalf("live marks %d, want %d", got, n)
				}
				db.Close()
				b.StartTimer()
			}
		})
	}
}

func copyWithoutFilters(b *testing.B, from, to string) {
	raw, err := os.ReadFile(from)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(to, raw, 0o600); err != nil {
		b.Fatal(err)
	}
	bdb, err := bolt.Open(to, 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer bdb.Close()
	if err := bdb.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(layout.FiltersRoot) }); err != nil {
		b.Fatal(err)
	}
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
