package oncekv_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
					b.ResetTimer()
					for range b.N {
						if crash {
							b.StopTimer()
							commitBehind(b, path)
							b.StartTimer()
						}
						db, err := oncekv.Open(path, opts)
						require.NoError(b, err)
						b.StopTimer()
						require.NoError(b, db.Close())
						b.StartTimer()
					}
				})
			}
		}
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
