package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPlateauQuick is the plateau benchmark at a scale that takes seconds
// (the CI runs it): a month at 100 keys per hour. It checks the run is what
// it claims (every hour sampled, a full retention of marks live at the end,
// the expired ones gone) and the goal on the file: within 1.5x of its size
// at the first full retention, no growth after the third. The simulation
// is deterministic (fake clock, one writer), so this cannot flake.
func TestPlateauQuick(t *testing.T) {
	cfg := plateauConfig{days: 30, keysPerHour: 100, batch: 50, retention: 7 * 24 * time.Hour,
		span: time.Hour, expireEvery: time.Minute}
	c := &config{payload: 128, response: 64}
	r, err := runPlateau(cfg, c, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(r.samples), 30*24; got != want {
		t.Fatalf("%d samples, want one per hour: %d", got, want)
	}
	last := r.samples[len(r.samples)-1]
	if last.applied != 30*24*100 {
		t.Fatalf("applied %d, want %d", last.applied, 30*24*100)
	}
	// A window expires once its newest possible mark is a retention old:
	// between one retention and one retention plus a window of marks live.
	if lo, hi := uint64(168*100), uint64(169*100); last.live < lo || last.live > hi {
		t.Fatalf("live marks %d, want %d..%d", last.live, lo, hi)
	}
	if last.expired+last.live != last.applied {
		t.Fatalf("expired %d + live %d != applied %d", last.expired, last.live, last.applied)
	}
	within, flat := r.size.plateaued()
	if !within || !flat {
		t.Fatalf("file size did not plateau:\n%s", r.markdown("TestPlateauQuick"))
	}

	dir := t.TempDir()
	if err := r.writeCSV(filepath.Join(dir, "plateau.csv")); err != nil {
		t.Fatal(err)
	}
	if err := r.chart(filepath.Join(dir, "plateau.png")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"plateau.csv", "plateau.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
}

func TestPlateauRejectsBadScale(t *testing.T) {
	for _, cfg := range []plateauConfig{
		{days: 0, keysPerHour: 1, batch: 1, retention: time.Hour, span: time.Hour, expireEvery: time.Minute},
		{days: 1, keysPerHour: 1, batch: 1, retention: time.Hour, span: time.Hour, expireEvery: 0},
	} {
		if _, err := runPlateau(cfg, &config{}, t.TempDir()); err == nil {
			t.Fatalf("%+v: no error", cfg)
		}
	}
}
