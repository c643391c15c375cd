package main

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plots writes the charts: throughput per peer durable and sync-off (one
// and N clients side by side), and oncekv against live marks.
func (st *suite) plots(dir string) error {
	for _, sync := range []bool{true, false} {
		if err := st.throughputChart(sync, filepath.Join(dir, "throughput-"+syncName(sync)+".png")); err != nil {
			return err
		}
	}
	if len(st.growth) > 0 {
		return st.growthChart(filepath.Join(dir, "growth.png"))
	}
	return nil
}

func (st *suite) throughputChart(sync bool, path string) error {
	var names []string
	series := map[string]plotter.Values{}
	labels := []string{"1 client", fmt.Sprintf("%d clients", st.cfg.clients)}
	if sync {
		labels = append(labels, fmt.Sprintf("batch of %d", st.cfg.batch))
	}
	for _, p := range allPeers {
		if st.get(p.name, kindUnique, sync, 1) == nil {
			continue
		}
		names = append(names, p.name)
		series[labels[0]] = append(series[labels[0]], st.rate(p.name, kindUnique, sync, 1))
		series[labels[1]] = append(series[labels[1]], st.rate(p.name, kindUnique, sync, st.cfg.clients))
		if sync {
			series[labels[2]] = append(series[labels[2]], st.rate(p.name, kindBatch, true, 1))
		}
	}
	if len(names) == 0 {
		return nil
	}
	pl := plot.New()
	pl.Title.Text = "Unique keys per second, " + syncName(sync) + " (higher is better)"
	// Bars on a log scale: gonum's bars start at 0, which a LogScale
	// cannot draw, so the bars are log10 of the rate on a linear axis,
	// with ticks labelled in ops/s.
	pl.Y.Label.Text = "ops/s (log scale)"
	pl.Y.Tick.Marker = decadeTicks{}
	pl.Y.Min = 0
	w := vg.Points(10)
	for i, l := range labels {
		v := series[l]
		for j := range v {
			v[j] = math.Log10(max(v[j], 1)) // not measured: no bar
		}
		bars, err := plotter.NewBarChart(v, w)
		if err != nil {
			return err
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		bars.Offset = w * vg.Length(float64(i)-float64(len(labels)-1)/2)
		pl.Add(bars)
		pl.Legend.Add(l, bars)
	}
	pl.Legend.Top = true
	pl.Legend.Left = true
	pl.Y.Max = math.Ceil(pl.Y.Max + 0.3) // room for the legend and the tallest bar
	pl.NominalX(names...)
	pl.X.Tick.Label.Rotation = 0.5
	pl.X.Tick.Label.XAlign = -0.9
	pl.X.Tick.Label.YAlign = -0.3
	pl.Add(plotter.NewGrid())
	return pl.Save(8*vg.Inch, 4.5*vg.Inch, path)
}

func (st *suite) growthChart(path string) error {
	pl := plot.New()
	pl.Title.Text = "oncekv: unique keys per second against live marks"
	pl.X.Label.Text = "live marks (log scale)"
	pl.Y.Label.Text = "ops/s, 1 client"
	pl.X.Scale = plot.LogScale{}
	pl.X.Tick.Marker = plot.LogTicks{Prec: -1}
	pl.Y.Min = 0
	var off, dur plotter.XYs
	for _, g := range st.growth {
		off = append(off, plotter.XY{X: float64(g.marks), Y: g.opsPerSec})
		dur = append(dur, plotter.XY{X: float64(g.marks), Y: g.durable})
	}
	for i, s := range []struct {
		name string
		xy   plotter.XYs
	}{{"sync-off", off}, {"durable", dur}} {
		l, pts, err := plotter.NewLinePoints(s.xy)
		if err != nil {
			return err
		}
		l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
		l.Width = vg.Points(2)
		pl.Add(l, pts)
		pl.Legend.Add(s.name, l, pts)
	}
	pl.Legend.Left = true
	pl.Add(plotter.NewGrid())
	return pl.Save(7*vg.Inch, 4*vg.Inch, path)
}

// decadeTicks labels a log10 axis with the powers of ten it spans.
type decadeTicks struct{}

func (decadeTicks) Ticks(lo, hi float64) []plot.Tick {
	names := []string{"1", "10", "100", "1k", "10k", "100k", "1M", "10M", "100M"}
	var ts []plot.Tick
	for d := math.Floor(lo); d <= math.Ceil(hi) && int(d) < len(names); d++ {
		ts = append(ts, plot.Tick{Value: d, Label: names[int(d)]})
		for m := 2.0; m < 10 && d+math.Log10(m) <= hi; m++ {
			ts = append(ts, plot.Tick{Value: d + math.Log10(m)})
		}
	}
	return ts
}

// queueRow is one cell of the queue suite.
type queueRow struct {
	name           string
	latency        bool // µs, lower is better; else a rate, higher is better
	oncekv, goqite float64
}

// queueChart draws oncekv's lead over goqite in each cell of the queue
// suite: its rate over goqite's, or goqite's latency over its own, so that
// a bar right of 1 always means oncekv is ahead. The axis is logarithmic
// (bars are log10 of the lead, ticks labelled as leads), so 0.5x and 2x
// are the same length.
func queueChart(rows []queueRow, path string) error {
	lead := make(plotter.Values, len(rows))
	names := make([]string, len(rows))
	for i, r := range rows {
		// The first cell at the top.
		j := len(rows) - 1 - i
		names[j] = r.name
		if r.latency {
			lead[j] = math.Log10(r.goqite / r.oncekv)
		} else {
			lead[j] = math.Log10(r.oncekv / r.goqite)
		}
	}
	pl := plot.New()
	pl.Title.Text = "Queue suite, durable: oncekv's lead over goqite (right of 1: oncekv ahead)"
	pl.X.Label.Text = "oncekv / goqite for rates, goqite / oncekv for latencies (log scale)"
	pl.X.Tick.Marker = leadTicks{}
	bars, err := plotter.NewBarChart(lead, vg.Points(16))
	if err != nil {
		return err
	}
	bars.Horizontal = true
	bars.Color = plotutil.Color(0)
	bars.LineStyle.Width = 0
	pl.Add(bars)
	pl.NominalY(names...)
	// At least 0.5x to 2x, and room past the longest bar.
	pl.X.Min = min(pl.X.Min-0.05, -math.Log10(2))
	pl.X.Max = max(pl.X.Max+0.05, math.Log10(2))
	pl.Add(plotter.NewGrid())
	return pl.Save(9*vg.Inch, 4.5*vg.Inch, path)
}

// leadTicks labels a log10 axis of ratios.
type leadTicks struct{}

func (leadTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for _, r := range []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100} {
		if v := math.Log10(r); v >= lo && v <= hi {
			ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(r, 'g', -1, 64) + "x"})
		}
	}
	return ts
}
