package httpcmp

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// body is what every request posts: a small JSON payment.
var body = []byte(`{"amount_cents":1200,"currency":"eur"}`)

// constant is the bare handler: a fixed 201, the cheapest a handler can be,
// so the middleware's cost shows in full.
func constant(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"receipt":"R-000001"}`)
}

// replayed is the key every rig answers once before measuring, so that
// the replay cells find it answered.
const replayed = "replayed"

// rig is servers on loopback: the bare handler, and the same handler
// behind the middleware on each store given to newRig.
type rig struct {
	bare    *httptest.Server
	wrapped map[string]*httptest.Server // by store name
	commits map[string]func() commits   // by store name
	names   []string                    // the stores, in order
	client  *http.Client
	next    atomic.Int64 // key counter for first requests
}

// newRig starts the bare server and one wrapped server per store in
// stores (none: the bare one only), each store answering replayed once.
func newRig(tb testing.TB, stores []store) *rig {
	r := &rig{
		bare:    httptest.NewServer(http.HandlerFunc(constant)),
		wrapped: map[string]*httptest.Server{},
		commits: map[string]func() commits{},
		// Enough idle connections for every client to keep its own.
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
	}
	tb.Cleanup(r.bare.Close)
	tb.Cleanup(r.client.CloseIdleConnections)
	for _, s := range stores {
		wrap, count := s.open(tb)
		srv := httptest.NewServer(wrap(http.HandlerFunc(constant)))
		tb.Cleanup(srv.Close)
		r.wrapped[s.name], r.commits[s.name] = srv, count
		r.names = append(r.names, s.name)
		if err := r.post(srv, replayed); err != nil {
			tb.Fatalf("%s: answering %q: %v", s.name, replayed, err)
		}
	}
	return r
}

// post sends one payment with key (none if empty) and checks the answer.
func (r *rig) post(srv *httptest.Server, key string) error {
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/pay", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("X-User", "alice")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusCreated {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return err
}

// kind is what a cell's requests are.
type kind int

const (
	bare   kind = iota // no middleware, no key
	replay             // the answered key, again and again
	first              // a new key every request
)

// cell is one measured setting: requests of kind from clients concurrent
// clients, on the named store ("" for bare).
type cell struct {
	name    string // "bare", or store/kind: "pg/first-8"
	store   string
	kind    kind
	clients int
}

// kinds are a store's cells, named after the store.
var kinds = []struct {
	name    string
	kind    kind
	clients int
}{
	{"replay", replay, 1},
	{"first-1", first, 1},
	{"first-8", first, 8},
}

// cells are bare, then each of r's stores' cells.
func (r *rig) cells() []cell {
	cs := []cell{{name: "bare", kind: bare, clients: 1}}
	for _, s := range r.names {
		for _, k := range kinds {
			cs = append(cs, cell{s + "/" + k.name, s, k.kind, k.clients})
		}
	}
	return cs
}

func (r *rig) firstKey() string { return fmt.Sprintf("k-%09d", r.next.Add(1)) }

// run sends n requests of c from c.clients goroutines and returns the
// wall time.
func (r *rig) run(tb testing.TB, c cell, n int) time.Duration {
	srv, key := r.bare, func() string { return "" }
	switch c.kind {
	case replay:
		srv, key = r.wrapped[c.store], func() string { return replayed }
	case first:
		srv, key = r.wrapped[c.store], r.firstKey
	}
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for i := range c.clients {
		share := n / c.clients
		if i < n%c.clients {
			share++
		}
		wg.Go(func() {
			for range share {
				if err := r.post(srv, key()); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if err := failed.Load(); err != nil {
		tb.Fatalf("%s: %v", c.name, err)
	}
	return took
}

// BenchmarkRequest measures each cell on its own, in a rig of its own:
// ns/op is per request (for first-8, wall time over all 8 clients'
// requests), with the store's commits per request and the wall time per
// commit (for the embedded store also the time a commit held the write
// lock, fsync included). The pg cells skip without ONCEKV_BENCH_PG_DSN.
func BenchmarkRequest(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		r := newRig(b, nil)
		b.ResetTimer()
		r.run(b, r.cells()[0], b.N)
	})
	for _, s := range stores {
		b.Run(s.name, func(b *testing.B) {
			if why := s.missing(); why != "" {
				b.Skip(why)
			}
			for i, k := range kinds {
				b.Run(k.name, func(b *testing.B) {
					r := newRig(b, []store{s})
					before := r.commits[s.name]()
					b.ResetTimer()
					took := r.run(b, r.cells()[1+i], b.N)
					b.StopTimer()
					reportCommits(b, r.commits[s.name]().sub(before), took, b.N)
				})
			}
		})
	}
}

// reportCommits reports c, the commits of n requests that took wall.
func reportCommits(b *testing.B, c commits, wall time.Duration, n int) {
	b.ReportMetric(float64(c.n)/float64(n), "commits/op")
	if c.n == 0 {
		return
	}
	b.ReportMetric(float64(wall.Microseconds())/float64(c.n), "wall-µs/commit")
	if c.took > 0 {
		b.ReportMetric(float64(c.took.Microseconds())/float64(c.n), "µs/commit")
	}
}

// Requests per turn of BenchmarkTargets: the read cells are fast, a first
// request is durable commits.
const (
	fastPerTurn    = 2000
	durablePerTurn = 200
)

// BenchmarkTargets measures every cell of every store in one rig, in
// turns, so that load from the rest of the machine falls on all of them
// alike, and reports issue 14's and issue 22's targets per store as
// ratios of medians over the turns: replay/bare (time per request, goal
// <= 2) and first-8/first-1 (requests per second, goal >= 4), and, as
// medians over the turns too, each cell's write transactions per request
// and, for the embedded store, the time a commit held the write lock,
// fsync included. Each iteration is one turn; run it with
// -benchtime=Nx. Without ONCEKV_BENCH_PG_DSN it logs why and measures the
// embedded store only.
func BenchmarkTargets(b *testing.B) {
	r := newRig(b, available(b))
	cells := r.cells()
	// cell -> one value per turn: ns per request, commits per request,
	// µs per commit (write lock held; embedded only)
	per, perCommits, commitTook := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	for b.Loop() {
		for _, c := range cells {
			n := fastPerTurn
			if c.kind == first {
				n = durablePerTurn
			}
			var before commits
			if c.store != "" {
				before = r.commits[c.store]()
			}
			per[c.name] = append(per[c.name], float64(r.run(b, c, n).Nanoseconds())/float64(n))
			if c.store == "" {
				continue
			}
			d := r.commits[c.store]().sub(before)
			perCommits[c.name] = append(perCommits[c.name], float64(d.n)/float64(n))
			if d.n > 0 && d.took > 0 {
				commitTook[c.name] = append(commitTook[c.name], float64(d.took.Microseconds())/float64(d.n))
			}
		}
	}
	med := func(name string) float64 { return median(per[name]) }
	for _, c := range cells {
		b.ReportMetric(med(c.name)/1e3, c.name+"-µs/req")
		if c.store != "" {
			b.ReportMetric(median(perCommits[c.name]), c.name+"-commits/req")
		}
		if v := commitTook[c.name]; len(v) > 0 {
			b.ReportMetric(median(v), c.name+"-µs/commit")
		}
	}
	for _, s := range r.names {
		replay := med(s+"/replay") / med("bare")
		scale := med(s+"/first-1") / med(s+"/first-8")
		b.ReportMetric(replay, s+"-replay/bare")
		b.ReportMetric(scale, s+"-first8/first1")
		b.Logf("%s: replay / bare, time per request: %.2f (goal <= 2: %s)", s, replay, verdict(replay <= 2))
		b.Logf("%s: first requests, 8 clients / 1 client, requests per second: %.2f (goal >= 4: %s)", s, scale, verdict(scale >= 4))
	}
}

// median is the median of v, 0 if v is empty.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// available are the stores that can run here; it logs why the others
// cannot.
func available(tb testing.TB) []store {
	var ok []store
	for _, s := range stores {
		if why := s.missing(); why != "" {
			tb.Log(why)
			continue
		}
		ok = append(ok, s)
	}
	return ok
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
