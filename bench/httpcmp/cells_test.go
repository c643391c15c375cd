package httpcmp

import "testing"

// TestCells runs every cell of every store that can run here on a tiny
// workload (a few requests each): each request answers 201, a replay
// writes nothing, and a first request commits at least once. The pg cells
// skip without ONCEKV_BENCH_PG_DSN.
func TestCells(t *testing.T) {
	const n = 16
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			if why := s.missing(); why != "" {
				t.Skip(why)
			}
			r := newRig(t, []store{s})
			for _, c := range r.cells() {
				before := r.commits[s.name]()
				r.run(t, c, n)
				got := r.commits[s.name]().sub(before).n
				switch {
				case c.kind == replay && got != 0:
					t.Errorf("%s: %d replays wrote %d transactions, want 0", c.name, n, got)
				case c.kind == first && got < 1:
					t.Errorf("%s: %d first requests wrote no transaction", c.name, n)
				}
			}
		})
	}
}
