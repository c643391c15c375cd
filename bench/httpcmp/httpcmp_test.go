package httpcmp

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
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

// rig is one durable store with two servers on loopback: the bare handler,
// and the same handler behind the middleware.
type rig struct {
	bare, wrapped *httptest.Server
	client        *http.Client
	next          atomic.Int64 // key counter for first requests
}

func newRig(b *testing.B) *rig {
	db, err := oncekv.Open(filepath.Join(b.TempDir(), "http.db"), &oncekv.Options{ExpireInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	mw, err := idemhttp.New(db, &idemhttp.Options{
		Scope: func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil },
	})
	if err != nil {
		b.Fatal(err)
	}
	r := &rig{
		bare:    httptest.NewServer(http.HandlerFunc(constant)),
		wrapped: httptest.NewServer(mw.Wrap(http.HandlerFunc(constant))),
		// Enough idle connections for every client to keep its own.
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
	}
	b.Cleanup(r.bare.Close)
	b.Cleanup(r.wrapped.Close)
	b.Cleanup(r.client.CloseIdleConnections)
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

// cell is one measured setting.
type cell struct {
	name    string
	clients int
	srv     func(*rig) *httptest.Server
	key     func(*rig) string
}

func (r *rig) firstKey() string { return fmt.Sprintf("k-%09d", r.next.Add(1)) }

var cells = []cell{
	{"bare", 1, func(r *rig) *httptest.Server { return r.bare }, func(*rig) string { return "" }},
	{"replay", 1, func(r *rig) *httptest.Server { return r.wrapped }, func(*rig) string { return "replayed" }},
	{"first-1", 1, func(r *rig) *httptest.Server { return r.wrapped }, (*rig).firstKey},
	{"first-8", 8, func(r *rig) *httptest.Server { return r.wrapped }, (*rig).firstKey},
}

// run sends n requests of c from c.clients goroutines and returns the
// wall time.
func (r *rig) run(b *testing.B, c cell, n int) time.Duration {
	srv := c.srv(r)
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
				if err := r.post(srv, c.key(r)); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if err := failed.Load(); err != nil {
		b.Fatalf("%s: %v", c.name, err)
	}
	return took
}

// BenchmarkRequest measures each cell on its own: ns/op is per request
// (for first-8, wall time over all 8 clients' requests).
func BenchmarkRequest(b *testing.B) {
	for _, c := range cells {
		b.Run(c.name, func(b *testing.B) {
			r := newRig(b)
			if err := r.post(r.wrapped, "replayed"); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			r.run(b, c, b.N)
		})
	}
}

// BenchmarkTargets measures the cells in turns, so that load from the rest
// of the machine falls on all of them alike, and reports issue 14's two
// targets as ratios of medians over the turns: replay/bare (time per
// request, goal <= 2) and first-8/first-1 (requests per second, goal >= 4).
// Each iteration is one turn; run it with -benchtime=Nx.
func BenchmarkTargets(b *testing.B) {
	const fast, durable = 2000, 200 // requests per turn
	r := newRig(b)
	if err := r.post(r.wrapped, "replayed"); err != nil {
		b.Fatal(err)
	}
	per := map[string][]float64{} // cell -> ns per request, one per turn
	for b.Loop() {
		for _, c := range cells {
			n := fast
			if c.name == "first-1" || c.name == "first-8" {
				n = durable
			}
			per[c.name] = append(per[c.name], float64(r.run(b, c, n).Nanoseconds())/float64(n))
		}
	}
	med := func(name string) float64 {
		v := slices.Clone(per[name])
		slices.Sort(v)
		return v[len(v)/2]
	}
	for _, c := range cells {
		b.ReportMetric(med(c.name)/1e3, c.name+"-µs/req")
	}
	replay := med("replay") / med("bare")
	scale := med("first-1") / med("first-8")
	b.ReportMetric(replay, "replay/bare")
	b.ReportMetric(scale, "first8/first1")
	b.Logf("replay / bare, time per request: %.2f (goal <= 2: %s)", replay, verdict(replay <= 2))
	b.Logf("first requests, 8 clients / 1 client, requests per second: %.2f (goal >= 4: %s)", scale, verdict(scale >= 4))
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
