package main

import (
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/oncekv/oncekv"
)

// plateauConfig is the "file must not grow forever" run: unique keys at a
// steady rate on a fake clock, expiry run as the background loop would run
// it, the file sampled every simulated hour. The real traffic it stands for
// is larger; keysPerHour scales it down so a month takes minutes.
type plateauConfig struct {
	run         bool
	days        int
	keysPerHour int
	batch       int // keys per ApplyBatch: a consumer's poll
	retention   time.Duration
	span        time.Duration
	expireEvery time.Duration // simulated time between Expire calls (Options.ExpireInterval)
	expireStep  int
}

func plateauFlags(fs *flag.FlagSet, p *plateauConfig) {
	fs.BoolVar(&p.run, "plateau", false, "run only the file-plateau benchmark (writes results/plateau.csv, plateau.png, plateau.md)")
	fs.IntVar(&p.days, "plateau-days", 30, "simulated days of steady traffic")
	fs.IntVar(&p.keysPerHour, "plateau-keys-per-hour", 2000, "unique keys applied per simulated hour")
	fs.IntVar(&p.batch, "plateau-batch", 100, "keys per ApplyBatch")
	fs.DurationVar(&p.retention, "plateau-retention", 7*24*time.Hour, "dedup window (Options.Retention)")
	fs.DurationVar(&p.span, "plateau-span", time.Hour, "window span (Options.WindowSpan)")
	fs.DurationVar(&p.expireEvery, "plateau-expire-every", time.Minute, "simulated time between Expire calls")
	fs.IntVar(&p.expireStep, "plateau-expire-step", 0, "Options.ExpireStep (0: oncekv's default)")
}

func (p *plateauConfig) validate() error {
	switch {
	case p.days <= 0 || p.keysPerHour <= 0 || p.batch <= 0 || p.expireStep < 0:
		return fmt.Errorf("-plateau-days, -plateau-keys-per-hour and -plateau-batch must be positive")
	case p.retention <= 0 || p.span <= 0 || p.expireEvery <= 0:
		return fmt.Errorf("-plateau-retention, -plateau-span and -plateau-expire-every must be positive")
	}
	return nil
}

// plateauSample is the store at the end of one simulated hour.
type plateauSample struct {
	at      time.Duration // simulated time since the start
	file    oncekv.FileStats
	live    uint64
	windows int
	applied uint64
	expired uint64
}

// plateauResult is a whole run and its verdict.
type plateauResult struct {
	cfg     plateauConfig
	samples []plateauSample
	took    time.Duration
	// size and highWater judge the file's length and bbolt's high-water
	// mark (FileStats.HighWater), which moves in pages where the file
	// moves in steps of up to 16 MiB.
	size, highWater growth
}

// growth is one measure through the run: its value at the first full
// retention, its peak, its value at three retentions and its largest
// value after that.
type growth struct{ atRetention, peak, atThird, afterThird int64 }

func (g *growth) add(at, retention time.Duration, v int64) {
	g.peak = max(g.peak, v)
	if at <= retention {
		g.atRetention = v
	}
	if at <= 3*retention {
		g.atThird = v
	} else {
		g.afterThird = max(g.afterThird, v)
	}
}

// plateaued reports the two goals: within 1.5x of the value at the first
// full retention, and no growth after the third.
func (g growth) plateaued() (within bool, flat bool) {
	return float64(g.peak) <= 1.5*float64(g.atRetention), g.afterThird <= g.atThird
}

// runPlateau applies cfg.keysPerHour unique keys every simulated hour for
// cfg.days, in batches spread evenly over the hour, calling Expire every
// cfg.expireEvery of simulated time, and samples the file every hour.
func runPlateau(cfg plateauConfig, c *config, dir string) (*plateauResult, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	clock := oncekvClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	start := clock.now
	db, err := oncekv.Open(filepath.Join(dir, "plateau.db"), &oncekv.Options{
		NoSync:         true, // the disk's speed is not what is measured: page reuse is
		Now:            clock.Now,
		Retention:      cfg.retention,
		WindowSpan:     cfg.span,
		ExpireInterval: -1, // driven below, on the fake clock
		ExpireStep:     cfg.expireStep,
	})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	res := &plateauResult{cfg: cfg}
	began := time.Now()
	ctx := context.Background()
	batches := (cfg.keysPerHour + cfg.batch - 1) / cfg.batch
	hours := cfg.days * 24
	nextExpire := start.Add(cfg.expireEvery)
	key := 0
	reqs := make([]oncekv.Request, 0, cfg.batch)
	for h := range hours {
		for b := range batches {
			clock.now = start.Add(time.Duration(h)*time.Hour + time.Duration(b)*time.Hour/time.Duration(batches))
			if !clock.now.Before(nextExpire) {
				if _, err := db.Expire(ctx); err != nil {
					return nil, err
				}
				for !clock.now.Before(nextExpire) { // ticks missed between batches are one call
					nextExpire = nextExpire.Add(cfg.expireEvery)
				}
			}
			reqs = reqs[:0]
			for range min(cfg.batch, cfg.keysPerHour-b*cfg.batch) {
				k := "plateau-" + strconv.Itoa(key)
				reqs = append(reqs, oncekv.Request{Handler: "plateau", Key: k, Payload: fill(k, c.payload)})
				key++
			}
			out, err := db.ApplyBatch(ctx, reqs, func(tx *oncekv.Tx, i int) ([]byte, error) {
				return plateauEffect(tx, c.response)
			})
			if err != nil {
				return nil, err
			}
			for _, o := range out {
				if o.Err != nil || o.Duplicate {
					return nil, fmt.Errorf("plateau: key %s: duplicate=%v err=%v", reqs[0].Key, o.Duplicate, o.Err)
				}
			}
		}
		clock.now = start.Add(time.Duration(h+1) * time.Hour)
		st := db.Stats()
		res.samples = append(res.samples, plateauSample{at: clock.now.Sub(start), file: st.File, live: st.LiveMarks,
			windows: len(st.Windows), applied: st.Total.Applied, expired: st.ExpiredMarks})
		if (h+1)%(24*7) == 0 {
			progress("plateau: day %3d  file %7.1f MiB  free %7.1f MiB  live marks %d", (h+1)/24,
				mib(st.File.Size), mib(st.File.FreeBytes), st.LiveMarks)
		}
	}
	res.took = time.Since(began)
	res.verdict()
	return res, nil
}

// plateauEffect overwrites one counter: the user data stays one key, so
// whatever the file does is the marks' doing.
func plateauEffect(tx *oncekv.Tx, response int) ([]byte, error) {
	b, err := tx.CreateBucketIfNotExists([]byte("plateau"))
	if err != nil {
		return nil, err
	}
	n, _ := strconv.ParseUint(string(b.Get([]byte("count"))), 10, 64)
	return fill("response", response), b.Put([]byte("count"), strconv.AppendUint(nil, n+1, 10))
}

// oncekvClock is the run's fake clock. One goroutine moves it and the
// store reads it from the same goroutine (expiry is driven, not
// background), so it needs no lock.
type oncekvClock struct{ now time.Time }

func (c *oncekvClock) Now() time.Time { return c.now }

func (r *plateauResult) verdict() {
	for _, s := range r.samples {
		r.size.add(s.at, r.cfg.retention, s.file.Size)
		r.highWater.add(s.at, r.cfg.retention, s.file.HighWater)
	}
}

// days writes d in days when it is a whole number of them.
func days(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func (r *plateauResult) markdown(command string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "## File size under steady traffic\n\n")
	fmt.Fprintf(&sb, "`%s`: %d days, %d unique keys per hour in batches of %d, retention %s, windows of %v, Expire every %v of simulated time; %v of wall time.\n\n",
		command, r.cfg.days, r.cfg.keysPerHour, r.cfg.batch, days(r.cfg.retention), r.cfg.span, r.cfg.expireEvery, r.took.Round(time.Second))
	fmt.Fprintf(&sb, "| day | file MiB | high-water MiB | free MiB | free pages | pending pages | freelist KiB | live marks |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.samples {
		if int(s.at/time.Hour)%(24*r.daysPerRow()) == 0 {
			fmt.Fprintf(&sb, "| %d | %.1f | %.1f | %.1f | %d | %d | %.1f | %d |\n", int(s.at/(24*time.Hour)), mib(s.file.Size), mib(s.file.HighWater),
				mib(s.file.FreeBytes), s.file.FreePages, s.file.PendingPages, float64(s.file.FreelistBytes)/1024, s.live)
		}
	}
	sb.WriteString("\n")
	for _, m := range []struct {
		name string
		g    growth
	}{{"file size", r.size}, {"high-water mark", r.highWater}} {
		within, flat := m.g.plateaued()
		fmt.Fprintf(&sb, "- %s: peak %s %.1f MiB / %.1f MiB at the first full retention = %.2fx (goal <= 1.5x)\n",
			metOrMissed(within), m.name, mib(m.g.peak), mib(m.g.atRetention), float64(m.g.peak)/float64(max(m.g.atRetention, 1)))
		fmt.Fprintf(&sb, "- %s: %s after three retentions at most %.1f MiB, at three retentions %.1f MiB (goal: no growth)\n",
			metOrMissed(flat), m.name, mib(m.g.afterThird), mib(m.g.atThird))
	}
	return sb.String()
}

func (r *plateauResult) daysPerRow() int { return max(r.cfg.days/15, 1) }

func metOrMissed(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func (r *plateauResult) writeCSV(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"hour", "file_bytes", "high_water_bytes", "free_bytes", "free_pages", "pending_pages", "freelist_bytes", "live_marks", "windows", "applied", "expired_marks"})
	for _, s := range r.samples {
		_ = w.Write([]string{strconv.Itoa(int(s.at / time.Hour)), strconv.FormatInt(s.file.Size, 10),
			strconv.FormatInt(s.file.HighWater, 10), strconv.FormatInt(s.file.FreeBytes, 10),
			strconv.Itoa(s.file.FreePages), strconv.Itoa(s.file.PendingPages), strconv.Itoa(s.file.FreelistBytes),
			strconv.FormatUint(s.live, 10), strconv.Itoa(s.windows), strconv.FormatUint(s.applied, 10), strconv.FormatUint(s.expired, 10)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// plateauMain runs the plateau benchmark alone and writes its results.
func plateauMain(c config) error {
	dir, err := os.MkdirTemp(c.tmp, "oncekv-bench-plateau-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	r, err := runPlateau(c.plateau, &c, dir)
	if err != nil {
		return err
	}
	md := r.markdown("go run . " + strings.Join(os.Args[1:], " "))
	fmt.Print(md)
	if c.out == "" {
		return nil
	}
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.out, "plateau.md"), []byte(md), 0o644); err != nil {
		return err
	}
	if err := r.writeCSV(filepath.Join(c.out, "plateau.csv")); err != nil {
		return err
	}
	return r.chart(filepath.Join(c.out, "plateau.png"))
}

// chart draws file size and free space (top) and live marks (bottom)
// against simulated days, with the retention periods marked.
func (r *plateauResult) chart(path string) error {
	top, bottom := plot.New(), plot.New()
	top.Title.Text = fmt.Sprintf("oncekv file under steady traffic: %d keys/h, retention %s (dashed)", r.cfg.keysPerHour, days(r.cfg.retention))
	top.Y.Label.Text = "MiB"
	bottom.Y.Label.Text = "live marks"
	bottom.X.Label.Text = "simulated days"
	var size, high, free, live plotter.XYs
	for _, s := range r.samples {
		day := s.at.Hours() / 24
		size = append(size, plotter.XY{X: day, Y: mib(s.file.Size)})
		high = append(high, plotter.XY{X: day, Y: mib(s.file.HighWater)})
		free = append(free, plotter.XY{X: day, Y: mib(s.file.FreeBytes)})
		live = append(live, plotter.XY{X: day, Y: float64(s.live)})
	}
	for i, s := range []struct {
		p    *plot.Plot
		name string
		xy   plotter.XYs
	}{{top, "file size", size}, {top, "high-water mark", high}, {top, "free below it", free}, {bottom, "live marks", live}} {
		l, err := plotter.NewLine(s.xy)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		s.p.Add(l)
		s.p.Legend.Add(s.name, l)
	}
	for _, p := range []*plot.Plot{top, bottom} {
		p.Y.Min = 0
		p.Legend.Left, p.Legend.Top = true, true
		p.Add(plotter.NewGrid())
		for k := r.cfg.retention; k <= time.Duration(r.cfg.days)*24*time.Hour; k += r.cfg.retention {
			x := k.Hours() / 24
			mark, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: p.Y.Max}})
			if err != nil {
				return err
			}
			mark.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
			p.Add(mark)
		}
	}
	w, h := 8*vg.Inch, 6*vg.Inch
	img := vgimg.New(w, h)
	canvases := plot.Align([][]*plot.Plot{{top}, {bottom}}, draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Millimeter * 2}, draw.New(img))
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
