package httpcmp

import (
	"context"
	"testing"
	"time"

	"github.com/oncekv/oncekv"
)

// BenchmarkPGReplayParts takes a PostgreSQL replay apart, in turns so
// that the machine's load falls on every part alike: the bare handler over
// HTTP (what the replay is compared with), one round trip of SELECT 1 on
// the pool, the store's Claim of an answered key without HTTP (what the
// middleware's replay asks the store: one plain read), and the replay
// through the middleware. Each iteration is one turn of fastPerTurn of
// each; run it with -benchtime=Nx. It skips without ONCEKV_BENCH_PG_DSN.
func BenchmarkPGReplayParts(b *testing.B) {
	if why := pg.missing(); why != "" {
		b.Skip(why)
	}
	r := newRig(b, []store{pg})
	pool, s := openPG(b)
	ctx := context.Background()
	req := oncekv.Request{Handler: "pay", Key: "answered", Payload: body}
	c, err := s.Claim(ctx, req, time.Minute)
	if err == nil {
		_, err = c.Complete(ctx, []byte("R-000001"), nil)
	}
	if err != nil {
		b.Fatal(err)
	}
	parts := []struct {
		name string
		one  func() error
	}{
		{"bare-http", func() error { return r.post(r.bare, "") }},
		{"select-1", func() error {
			var one int
			return pool.QueryRow(ctx, "SELECT 1").Scan(&one)
		}},
		{"store-claim-done", func() error {
			c, err := s.Claim(ctx, req, time.Minute)
			if err == nil && !c.Done() {
				b.Fatal("the answered key is not done")
			}
			return err
		}},
		{"store-claim-done-cancelable", func() error {
			// As under a request's context, which net/http cancels when
			// the client goes: pgx then watches it for every query.
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			_, err := s.Claim(ctx, req, time.Minute)
			return err
		}},
		{"http-replay", func() error { return r.post(r.wrapped[pg.name], replayed) }},
	}
	per := map[string][]float64{}
	for b.Loop() {
		for _, p := range parts {
			start := time.Now()
			for range fastPerTurn {
				if err := p.one(); err != nil {
					b.Fatalf("%s: %v", p.name, err)
				}
			}
			per[p.name] = append(per[p.name], float64(time.Since(start).Nanoseconds())/fastPerTurn)
		}
	}
	for _, p := range parts {
		b.ReportMetric(median(per[p.name])/1e3, p.name+"-µs")
	}
}
