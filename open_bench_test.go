package oncekv_test

import (
	"context"
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
