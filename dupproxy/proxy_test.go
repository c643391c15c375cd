package dupproxy_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/dupproxy"
)

const route = "POST /accounts/{id}/deposits"

// volatile are the bank's fields that differ between two correct answers.
var volatile = []string{"$.at", "$.request_id"}

// A deposit handler that is not idempotent is flagged: every copy with
// the same key deposits again and gets another balance. The client gets
// the upstream's answer to its own request, byte for byte.
func TestANonIdempotentRouteIsFlagged(t *testing.T) {
	bank, up := newBank(t, false)
	p, srv := newProxy(t, up.URL, dupproxy.Options{Mask: volatile, CompareHeaders: []string{"Location"}})
	for i := range 5 {
		trace := fmt.Sprint("t", i)
		got := post(t, srv.URL, "42", fmt.Sprint("key-", i), trace, 10)
		require.Equal(t, http.StatusCreated, got.status)
		settle(t, p)
		seen := bank.seen(trace)
		require.Len(t, seen, 2, "the original and its copy")
		require.Equal(t, seen[0].body, got.body, "the client's answer is the original's")
	}
	r := settle(t, p)
	w := row(t, r, route, dupproxy.WithKey)
	require.Equal(t, uint64(5), w.Requests)
	require.Equal(t, uint64(5), w.Copies)
	require.Equal(t, uint64(5), w.Differed)
	require.True(t, w.Flagged())
	require.Len(t, w.Examples, 5)
	require.Equal(t, "body $.balance: 10 vs 20", w.Examples[0].Difference)
	require.Equal(t, dupproxy.Example{Method: "POST", Path: "/accounts/42/deposits", Original: 201, Copy: 201,
		Difference: "body $.balance: 30 vs 40"}, w.Examples[1])
	require.Equal(t, uint64(5), r.Copied)
}

// The same handler behind idemhttp is clean: each copy with the key gets
// the stored answer back, and the deposit happens once.
func TestTheSameRouteBehindIdemhttpIsClean(t *testing.T) {
	bank, up := newBank(t, true)
	p, srv := newProxy(t, up.URL, dupproxy.Options{Mask: volatile, CompareHeaders: []string{"Location", "Content-Type"}})
	for i := range 5 {
		got := post(t, srv.URL, "42", fmt.Sprint("key-", i), fmt.Sprint("t", i), 10)
		require.Equal(t, http.StatusCreated, got.status)
	}
	r := settle(t, p)
	w := row(t, r, route, dupproxy.WithKey)
	require.Equal(t, uint64(5), w.Copies)
	require.Zero(t, w.Differed, "%+v", w.Examples)
	require.False(t, w.Flagged())
	require.Len(t, bank.seen("t0"), 1, "the copy was answered from the stored response")
	require.Equal(t, `{"balance":50}`, get(t, srv.URL+"/accounts/42"))
}

// A copy without the key shows the route needs one: behind idemhttp the
// copy with the key is clean, the one without deposits again.
func TestACopyWithoutTheKeyFindsTheRoutesThatNeedOne(t *testing.T) {
	_, up := newBank(t, true)
	p, srv := newProxy(t, up.URL, dupproxy.Options{Mask: volatile, Keys: dupproxy.BothKeys})
	for i := range 3 {
		post(t, srv.URL, "42", fmt.Sprint("key-", i), fmt.Sprint("t", i), 10)
	}
	r := settle(t, p)
	require.Zero(t, row(t, r, route, dupproxy.WithKey).Differed)
	without := row(t, r, route, dupproxy.WithoutKey)
	require.Equal(t, uint64(3), without.Copies)
	require.Equal(t, uint64(3), without.Differed)
	require.Contains(t, without.Examples[0].Difference, "body $.balance:")
}

// A concurrent copy meets the original still running: idemhttp answers
// 409, and the proxy asks again once the original is answered, then gets
// the stored answer. The original is held inside its handler until the
// 409 was given.
func TestAConcurrentCopyIsAskedAgainAfterA409(t *testing.T) {
	release := make(chan struct{})
	var arrivals atomic.Int32
	var once sync.Once
	outer := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrivals.Add(1)
			sw := &statusWriter{ResponseWriter: w}
			h.ServeHTTP(sw, r)
			if sw.status == http.StatusConflict {
				once.Do(func() { close(release) })
			}
		})
	}
	bank, up := newBankWith(t, true, release, outer)
	// The upstream must take the original first for the copy to meet it
	// running: the copy's round trip waits until the original is held.
	var trips atomic.Int32
	transport := roundTripper(func(r *http.Request) (*http.Response, error) {
		if trips.Add(1) == 2 {
			<-bank.entered
		}
		return http.DefaultTransport.RoundTrip(r)
	})
	p, srv := newProxy(t, up.URL, dupproxy.Options{Mode: dupproxy.Concurrent, Mask: volatile, Transport: transport})
	got := post(t, srv.URL, "42", "key-1", "t1", 10)
	require.Equal(t, http.StatusCreated, got.status)
	r := settle(t, p)
	w := row(t, r, route, dupproxy.WithKey)
	require.Equal(t, uint64(1), w.Copies)
	require.Zero(t, w.Differed, "%+v", w.Examples)
	require.Zero(t, w.Conflicts)
	require.Equal(t, int32(3), arrivals.Load(), "the original, the copy's 409, the copy again")
	require.Len(t, bank.seen("t1"), 1)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// statusWriter notes the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// When the upstream takes the concurrent copy first, the client gets the
// 409 (what any duplicate racing its original risks): a conflict, not a
// difference.
func TestAConcurrentCopyThatComesFirstIsAConflict(t *testing.T) {
	release := make(chan struct{})
	var up *bank
	outer := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Test-Trip") == "1" { // the original: after the copy's claim
				<-up.entered
				h.ServeHTTP(w, r)
				close(release)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	up, upSrv := newBankWith(t, true, release, outer)
	var trips atomic.Int32
	transport := roundTripper(func(r *http.Request) (*http.Response, error) {
		r.Header.Set("X-Test-Trip", fmt.Sprint(trips.Add(1)))
		return http.DefaultTransport.RoundTrip(r)
	})
	p, srv := newProxy(t, upSrv.URL, dupproxy.Options{Mode: dupproxy.Concurrent, Transport: transport})
	got := post(t, srv.URL, "42", "key-1", "t1", 10)
	require.Equal(t, http.StatusConflict, got.status)
	w := row(t, settle(t, p), route, dupproxy.WithKey)
	require.Equal(t, uint64(1), w.Conflicts)
	require.Zero(t, w.Differed)
}

// A copy still answered 409 once the original is answered is a conflict,
// not a difference.
func TestAConcurrentCopyStillInConflictIsCounted(t *testing.T) {
	var n atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) > 1 {
			w.WriteHeader(http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	p, srv := newProxy(t, up.URL, dupproxy.Options{Mode: dupproxy.Concurrent})
	post(t, srv.URL, "42", "key-1", "t1", 10)
	w := row(t, settle(t, p), route, dupproxy.WithKey)
	require.Equal(t, uint64(1), w.Conflicts)
	require.Zero(t, w.Differed)
}

// A delayed copy goes after the answer and the delay; Close cancels the
// ones still waiting.
func TestDelayedCopies(t *testing.T) {
	bank, up := newBank(t, false)
	p, srv := newProxy(t, up.URL, dupproxy.Options{Mode: dupproxy.Delayed, Delay: time.Millisecond, Mask: volatile})
	post(t, srv.URL, "42", "key-1", "t1", 10)
	w := row(t, settle(t, p), route, dupproxy.WithKey)
	require.Equal(t, uint64(1), w.Differed)
	require.Len(t, bank.seen("t1"), 2)

	p2, srv2 := newProxy(t, up.URL, dupproxy.Options{Mode: dupproxy.Delayed, Delay: time.Hour})
	post(t, srv2.URL, "42", "key-2", "t2", 10)
	require.NoError(t, p2.Close(), "returns at once: the copy waiting for its hour is cancelled")
	require.Len(t, bank.seen("t2"), 1)
	require.Equal(t, uint64(1), p2.Report().Copied)
}

// Only a fraction of the requests get a copy, as the draws say.
func TestFractionOfRequestsCopied(t *testing.T) {
	bank, up := newBank(t, false)
	draws := []float64{0.5, 0.04, 0.9, 0.01}
	var i atomic.Int32
	p, srv := newProxy(t, up.URL, dupproxy.Options{Fraction: 0.05,
		Rand: func() float64 { return draws[int(i.Add(1)-1)%len(draws)] }})
	for j := range 4 {
		post(t, srv.URL, "42", fmt.Sprint("k", j), fmt.Sprint("t", j), 1)
	}
	r := settle(t, p)
	require.Equal(t, uint64(4), r.Requests)
	require.Equal(t, uint64(2), r.Copied)
	require.Len(t, bank.seen("t0"), 1)
	require.Len(t, bank.seen("t1"), 2)
}

// A request whose body is over MaxBody is forwarded whole, without a copy.
func TestABodyOverMaxBodyIsForwardedWithoutACopy(t *testing.T) {
	var got []byte
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	p, srv := newProxy(t, up.URL, dupproxy.Options{MaxBody: 16})
	body := strings.Repeat("x", 100)
	resp, err := http.Post(srv.URL+"/accounts/42/deposits", "text/plain", strings.NewReader(body))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, body, string(got))
	r := settle(t, p)
	require.Equal(t, uint64(1), r.SkippedLarge)
	require.Zero(t, r.Copied)
}

// Answers longer than MaxBody are compared by status and headers only.
func TestAnswersOverMaxBodyAreNotComparedByBody(t *testing.T) {
	var n atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%d%s", n.Add(1), strings.Repeat("y", 64))
	}))
	t.Cleanup(up.Close)
	p, srv := newProxy(t, up.URL, dupproxy.Options{MaxBody: 32})
	resp, err := http.Post(srv.URL+"/x", "text/plain", nil)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, "1"+strings.Repeat("y", 64), string(b), "the client gets all of it")
	w := row(t, settle(t, p), "POST /x", dupproxy.WithoutKey)
	require.Equal(t, uint64(1), w.Copies)
	require.Zero(t, w.Differed)
}

// Hop-by-hop headers are handled as ReverseProxy does: neither the
// original nor the copy carries them to the upstream, and the client does
// not get the upstream's.
func TestHopByHopHeadersStayOnTheirHop(t *testing.T) {
	var mu sync.Mutex
	var headers []http.Header
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		headers = append(headers, r.Header.Clone())
		mu.Unlock()
		w.Header().Set("Connection", "X-Upstream-Hop")
		w.Header().Set("X-Upstream-Hop", "1")
		w.Header().Set("X-Kept", "1")
	}))
	t.Cleanup(up.Close)
	p, srv := newProxy(t, up.URL, dupproxy.Options{})
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/x", nil)
	require.NoError(t, err)
	req.Header.Set("Connection", "X-Client-Hop")
	req.Header.Set("X-Client-Hop", "secret")
	req.Header.Set("X-End-To-End", "1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Empty(t, resp.Header.Get("X-Upstream-Hop"))
	require.Equal(t, "1", resp.Header.Get("X-Kept"))
	settle(t, p)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, headers, 2)
	for _, h := range headers {
		require.Empty(t, h.Get("X-Client-Hop"))
		require.Equal(t, "1", h.Get("X-End-To-End"))
		require.Equal(t, "127.0.0.1", h.Get("X-Forwarded-For"))
	}
}

// Only the routes named are copied, each a row of its own.
func TestRoutesNameWhatIsCopied(t *testing.T) {
	_, up := newBank(t, false)
	p, srv := newProxy(t, up.URL, dupproxy.Options{Routes: []string{"POST /accounts/{id}/deposits"}, Mask: volatile})
	post(t, srv.URL, "42", "k", "t", 1)
	resp, err := http.Post(srv.URL+"/elsewhere", "text/plain", nil)
	require.NoError(t, err)
	resp.Body.Close()
	r := settle(t, p)
	require.Equal(t, uint64(2), r.Requests)
	require.Equal(t, uint64(1), r.Eligible)
	require.Len(t, r.Routes, 1)
	require.Equal(t, uint64(1), r.Routes[0].Differed)
}

// Without Routes, paths are folded, and past MaxRoutes the rest share a row.
func TestRoutesAreBounded(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	p, srv := newProxy(t, up.URL, dupproxy.Options{MaxRoutes: 2})
	for _, path := range []string{"/a/1", "/a/2", "/a/3f2a9c1e-7b44-4c2b-9d7e-1a2b3c4d5e6f", "/b", "/c", "/d"} {
		resp, err := http.Post(srv.URL+path, "text/plain", nil)
		require.NoError(t, err)
		resp.Body.Close()
	}
	r := settle(t, p)
	var names []string
	for _, row := range r.Routes {
		names = append(names, row.Route)
	}
	require.Equal(t, []string{"(other routes)", "POST /a/{id}", "POST /b"}, names)
	require.Equal(t, uint64(3), row(t, r, "POST /a/{id}", dupproxy.WithoutKey).Copies)
	require.Equal(t, uint64(2), row(t, r, "(other routes)", dupproxy.WithoutKey).Copies)
}

// Past MaxInFlight, a request is forwarded without a copy.
func TestCopiesInFlightAreBounded(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{})
	var n atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 2 { // the first request's copy
			close(arrived)
			<-release
		}
	}))
	t.Cleanup(up.Close)
	p, srv := newProxy(t, up.URL, dupproxy.Options{MaxInFlight: 1})
	for i := range 2 {
		resp, err := http.Post(srv.URL+"/x", "text/plain", nil)
		require.NoError(t, err)
		resp.Body.Close()
		if i == 0 {
			<-arrived // the copy holds the only slot
		}
	}
	close(release)
	r := settle(t, p)
	require.Equal(t, uint64(1), r.Copied)
	require.Equal(t, uint64(1), r.SkippedBusy)
}

// A copy that cannot reach the upstream is an error, not a difference.
func TestACopyThatFailsIsAnError(t *testing.T) {
	var n atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) > 1 {
			panic(http.ErrAbortHandler) // the copy's connection is cut
		}
	}))
	t.Cleanup(up.Close)
	p, srv := newProxy(t, up.URL, dupproxy.Options{})
	resp, err := http.Post(srv.URL+"/x", "text/plain", nil)
	require.NoError(t, err)
	resp.Body.Close()
	w := row(t, settle(t, p), "POST /x", dupproxy.WithoutKey)
	require.Equal(t, uint64(1), w.Errors)
	require.Zero(t, w.Differed)
}

// New names every bad option.
func TestNewRefusesBadOptions(t *testing.T) {
	_, err := dupproxy.New(&dupproxy.Options{Fraction: 2, Mask: []string{"$.a[x]", "$"}, Routes: []string{"BAD PATTERN HERE"},
		MaxBody: -1})
	require.ErrorIs(t, err, dupproxy.ErrInvalidOptions)
	for _, want := range []string{"Upstream", "Fraction = 2", `Mask "$.a[x]"`, `Mask "$"`, "Routes", "MaxBody = -1"} {
		require.Contains(t, err.Error(), want)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(bytes.TrimSpace(b))
}

// After Close, requests are still forwarded, without a copy.
func TestAfterCloseRequestsAreForwardedWithoutACopy(t *testing.T) {
	bank, up := newBank(t, false)
	p, srv := newProxy(t, up.URL, dupproxy.Options{})
	require.NoError(t, p.Close())
	got := post(t, srv.URL, "42", "k", "t", 10)
	require.Equal(t, http.StatusCreated, got.status)
	require.Len(t, bank.seen("t"), 1)
	require.Zero(t, settle(t, p).Copied)
}
