package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// config holds every knob of a run; each is a flag.
type config struct {
	keys       int     // unique keys per measured run, durable cells
	fastKeys   int     // operations per measured run, sync-off and duplicate cells
	sizeKeys   int     // marks loaded before measuring bytes on disk per mark
	dupRatio   float64 // share of redeliveries in the mixed cell; 0 skips it
	payload    int     // payload bytes
	response   int     // stored response bytes
	clients    int     // the concurrent clients of the "N clients" cells
	batch      int     // batch size of the batch cells
	runs       int     // measured runs per cell; the cell is their median
	sync       string  // "both", "on" or "off": which unique-key cells to run
	bloom      bool    // oncekv peers: keep the Bloom filter on (oncekv-nobloom always has it off)
	span       time.Duration
	growth     []int // live marks at which oncekv's growth curve is measured
	peers      []string
	pgDSN      string
	out        string // results directory; empty writes nothing
	tmp        string // where the stores live; its device is the one measured
	quick      bool
	cpuProfile string
	plateau    plateauConfig
	notes      string // file of "why" notes for missed targets
	// growthWindows spreads the growth curve's marks over this many windows
	// (1: all in one, the worst case for the window the next mark lands in).
	growthWindows int
	openMarks     int // live marks of the open cell; 0 skips it
	openWindows   int // windows the open cell's marks are spread over
	fenceKeys     int // keys per transaction of the PutFenced cell; 0 skips it
	// pgExpireMarks are the window sizes of the PostgreSQL expiry cell
	// (pgexpire.go); none skips it.
	pgExpireMarks []int
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var c config
	var peers, growth, pgExpire string
	var full bool
	fs.IntVar(&c.keys, "keys", 400, "unique keys per measured run of a durable cell")
	fs.IntVar(&c.fastKeys, "fast-keys", 4000, "operations per measured run of a sync-off or duplicate cell")
	fs.IntVar(&c.sizeKeys, "size-keys", 100_000, "marks loaded before measuring bytes on disk per mark")
	fs.Float64Var(&c.dupRatio, "dup", 0, "duplicate ratio of an extra mixed cell (0 < dup < 1); 0 skips it")
	fs.IntVar(&c.payload, "payload", 128, "payload size in bytes")
	fs.IntVar(&c.response, "response", 64, "response size in bytes")
	fs.IntVar(&c.clients, "clients", 8, "concurrent clients of the multi-client cells")
	fs.IntVar(&c.batch, "batch", 500, "batch size of the batch cells")
	fs.IntVar(&c.runs, "runs", 3, "measured runs per cell (after one warm-up); a cell is their median")
	fs.StringVar(&c.sync, "sync", "both", "unique-key cells to run: both, on (durable) or off")
	fs.BoolVar(&c.bloom, "bloom", true, "Bloom filter on for the oncekv peers (oncekv-nobloom is always off)")
	fs.DurationVar(&c.span, "span", time.Hour, "oncekv window span")
	fs.StringVar(&growth, "growth", "10000,100000,1000000", "live marks at which oncekv's growth curve is measured")
	fs.StringVar(&peers, "peers", "", "comma-separated peer names to run (default all); see -list")
	list := fs.Bool("list", false, "list the peers and exit")
	fs.StringVar(&c.pgDSN, "pg-dsn", os.Getenv("ONCEKV_BENCH_PG_DSN"), "PostgreSQL DSN (default $ONCEKV_BENCH_PG_DSN); empty skips PostgreSQL")
	fs.StringVar(&c.out, "out", "results", "results directory")
	fs.StringVar(&c.tmp, "tmp", os.TempDir(), "directory for the stores (its disk is measured)")
	fs.BoolVar(&c.quick, "quick", false, "smaller runs: the suite in under 2 minutes")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.BoolVar(&full, "full", false, "growth curve up to 10M live marks, and the open cell at 10M (-open-marks)")
	fs.StringVar(&c.notes, "notes", "notes.txt", "file of `id: reason` lines printed under the missed targets they name")
	fs.IntVar(&c.growthWindows, "growth-windows", 1, "windows the growth curve's marks are spread over (1: all in the window new marks land in)")
	fs.IntVar(&c.openMarks, "open-marks", 0, "live marks of the open cell, loaded with DB.LoadMarks; 0 skips it (-full: 10000000)")
	fs.IntVar(&c.openWindows, "open-windows", 1, "windows the open cell's marks are spread over")
	fs.IntVar(&c.fenceKeys, "fence-keys", 2000, "keys per transaction of the PutFenced / Put cell; 0 skips it")
	fs.StringVar(&pgExpire, "pg-expire-marks", "100000", "marks of the window the PostgreSQL expiry cell expires, comma-separated sizes; 0 skips it (-full adds 1000000)")
	plateauFlags(fs, &c.plateau)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if *list {
		for _, p := range allPeers {
			fmt.Println(p.name)
		}
		os.Exit(0)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.quick {
		// Only the defaults shrink: a flag given explicitly wins.
		shrink := func(name string, v *int, to int) {
			if !set[name] {
				*v = to
			}
		}
		shrink("keys", &c.keys, 200)
		shrink("fast-keys", &c.fastKeys, 2000)
		shrink("size-keys", &c.sizeKeys, 20_000)
		if !set["growth"] {
			growth = "10000,100000,300000"
		}
	}
	if full && !set["growth"] {
		growth += ",10000000"
	}
	if full && !set["pg-expire-marks"] {
		pgExpire += ",1000000"
	}
	if full && !set["open-marks"] {
		c.openMarks = 10_000_000
	}
	for _, s := range strings.Split(growth, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err != nil || n <= 0 {
			return c, fmt.Errorf("-growth: bad size %q", s)
		}
		c.growth = append(c.growth, n)
	}
	for _, s := range strings.Split(pgExpire, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err != nil || n < 0 {
			return c, fmt.Errorf("-pg-expire-marks: bad size %q", s)
		}
		if n > 0 {
			c.pgExpireMarks = append(c.pgExpireMarks, n)
		}
	}
	if peers != "" {
		c.peers = strings.Split(peers, ",")
		for _, name := range c.peers {
			if findPeer(name) == nil {
				return c, fmt.Errorf("-peers: unknown peer %q (see -list)", name)
			}
		}
	}
	switch {
	case c.sync != "both" && c.sync != "on" && c.sync != "off":
		return c, fmt.Errorf("-sync: want both, on or off, got %q", c.sync)
	case c.keys <= 0 || c.fastKeys <= 0 || c.sizeKeys <= 0 || c.runs <= 0:
		return c, fmt.Errorf("-keys, -fast-keys, -size-keys and -runs must be positive")
	case c.clients <= 0 || c.batch <= 0:
		return c, fmt.Errorf("-clients and -batch must be positive")
	case c.dupRatio < 0 || c.dupRatio >= 1:
		return c, fmt.Errorf("-dup: want 0 <= dup < 1, got %v", c.dupRatio)
	case c.payload < 0 || c.response < 0:
		return c, fmt.Errorf("-payload and -response must not be negative")
	case c.openMarks < 0 || c.fenceKeys < 0:
		return c, fmt.Errorf("-open-marks and -fence-keys must not be negative")
	case c.growthWindows < 1 || c.openWindows < 1:
		return c, fmt.Errorf("-growth-windows and -open-windows must be positive")
	case time.Duration(max(c.growthWindows, c.openWindows)+1)*c.span > retention:
		return c, fmt.Errorf("-growth-windows and -open-windows: %d windows of -span %v do not fit the retention of %v",
			max(c.growthWindows, c.openWindows)+1, c.span, retention)
	}
	return c, nil
}

// wanted reports whether the peer was selected with -peers.
func (c *config) wanted(name string) bool {
	if len(c.peers) == 0 {
		return true
	}
	for _, p := range c.peers {
		if p == name {
			return true
		}
	}
	return false
}
