package idemhttp_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
)

func TestNewValidatesOptions(t *testing.T) {
	db := openDB(t, newClock(), nil)
	_, err := idemhttp.New(db, nil)
	require.ErrorIs(t, err, idemhttp.ErrInvalidOptions)
	require.ErrorContains(t, err, "Scope")

	_, err = idemhttp.New(nil, &idemhttp.Options{Scope: userScope})
	require.ErrorIs(t, err, idemhttp.ErrInvalidOptions)
	require.ErrorContains(t, err, "db is nil")

	_, err = idemhttp.New(db, &idemhttp.Options{
		Scope:              userScope,
		MaxBodyBytes:       -1,
		MaxRecordBytes:     1<<30 + 1, // over 1 GiB, and an int on 32-bit platforms too
		Lease:              time.Second,
		Heartbeat:          2 * time.Second,
		Methods:            []string{"PO ST"},
		FingerprintHeaders: []string{"Content:Type"},
		ReplayHeaders:      []string{""},
	})
	require.ErrorIs(t, err, idemhttp.ErrInvalidOptions)
	for _, field := range []string{"MaxBodyBytes", "MaxRecordBytes", "Heartbeat", "Methods", "FingerprintHeaders", "ReplayHeaders"} {
		require.ErrorContains(t, err, field)
	}
	require.True(t, strings.HasPrefix(err.Error(), "oncekv: "), err.Error())
}

func TestFirstRequestStoredThenReplayed(t *testing.T) {
	h := &counter{}
	srv := serve(t, openDB(t, newClock(), nil), nil, h)
	c := call{key: "k1", user: "alice", body: []byte(`{"amount":12}`)}

	first := send(t, srv, c)
	require.Equal(t, http.StatusCreated, first.status)
	require.Equal(t, "run 1 for alice", string(first.body))
	require.False(t, first.replayed())

	again := send(t, srv, c)
	require.Equal(t, http.StatusCreated, again.status)
	require.Equal(t, first.body, again.body)
	require.True(t, again.replayed())
	require.EqualValues(t, 1, h.runs.Load())
}

func TestMethodsCovered(t *testing.T) {
	h := &counter{}
	srv := serve(t, openDB(t, newClock(), nil), nil, h)
	// GET and PUT are not covered by default: the key is ignored.
	for _, m := range []string{http.MethodGet, http.MethodPut} {
		send(t, srv, call{method: m, key: "k", user: "alice"})
		send(t, srv, call{method: m, key: "k", user: "alice"})
	}
	require.EqualValues(t, 4, h.runs.Load())
	// PATCH is.
	send(t, srv, call{method: http.MethodPatch, key: "p", user: "alice"})
	require.True(t, send(t, srv, call{method: http.MethodPatch, key: "p", user: "alice"}).replayed())
	require.EqualValues(t, 5, h.runs.Load())

	// Configured: PUT only.
	h2 := &counter{}
	srv2 := serve(t, openDB(t, newClock(), nil), &idemhttp.Options{Methods: []string{http.MethodPut}}, h2)
	send(t, srv2, call{method: http.MethodPut, key: "k", user: "alice"})
	require.True(t, send(t, srv2, call{method: http.MethodPut, key: "k", user: "alice"}).replayed())
	send(t, srv2, call{key: "k", user: "alice"})
	send(t, srv2, call{key: "k", user: "alice"})
	require.EqualValues(t, 3, h2.runs.Load())
}

func TestMissingKey(t *testing.T) {
	h := &counter{}
	srv := serve(t, openDB(t, newClock(), nil), nil, h)
	require.Equal(t, http.StatusCreated, send(t, srv, call{user: "alice"}).status)
	require.Equal(t, http.StatusCreated, send(t, srv, call{user: "alice"}).status)
	require.EqualValues(t, 2, h.runs.Load(), "without a key, requests pass through")

	h2 := &counter{}
	srv2 := serve(t, openDB(t, newClock(), nil), &idemhttp.Options{RequireKey: true}, h2)
	rep := send(t, srv2, call{user: "alice"})
	require.Equal(t, http.StatusBadRequest, rep.status)
	typ, _ := problemOf(t, rep)
	require.Equal(t, idemhttp.ProblemKeyMissing, typ)
	require.Zero(t, h2.runs.Load())
}

func TestMalformedKey(t *testing.T) {
	h := &counter{}
	srv := serve(t, openDB(t, newClock(), nil), nil, h)
	for name, hdr := range map[string][]string{
		"empty":         {""},
		"blank":         {"   "},
		"too long":      {strings.Repeat("k", idemhttp.MaxKeyLen+1)},
		"not ascii":     {"clé"},
		"control":       {"a\tb"},
		"twice":         {"a", "b"},
		"unterminated":  {`"abc`},
		"bad escape":    {`"a\nb"`},
		"stray quote":   {`"a"b"`},
		"quoted, empty": {`""`},
	} {
		t.Run(name, func(t *testing.T) {
			rep := send(t, srv, call{user: "alice", header: http.Header{"Idempotency-Key": hdr}})
			require.Equal(t, http.StatusBadRequest, rep.status)
			typ, _ := problemOf(t, rep)
			require.Equal(t, idemhttp.ProblemKeyInvalid, typ)
		})
	}
	require.Zero(t, h.runs.Load())

	// The draft's quoted form and the bare form name the same key.
	send(t, srv, call{user: "alice", key: "order-7"})
	rep := send(t, srv, call{user: "alice", key: `"order-7"`})
	require.True(t, rep.replayed())
	require.Equal(t, http.StatusCreated, send(t, srv, call{user: "alice", key: strings.Repeat("k", idemhttp.MaxKeyLen)}).status)
	require.EqualValues(t, 2, h.runs.Load())
}

func TestScopeIdentifiesTheCaller(t *testing.T) {
	h := &counter{}
	srv := serve(t, openDB(t, newClock(), nil), nil, h)
	rep := send(t, srv, call{key: "k"}) // no X-User: Scope fails
	require.Equal(t, http.StatusUnauthorized, rep.status)
	typ, _ := problemOf(t, rep)
	require.Equal(t, idemhttp.ProblemUnidentified, typ)

	srvEmpty := serve(t, openDB(t, newClock(), nil), &idemhttp.Options{
		Scope: func(*http.Request) (string, error) { return "", nil },
	}, h)
	require.Equal(t, http.StatusUnauthorized, send(t, srvEmpty, call{key: "k", user: "alice"}).status)
	require.Zero(t, h.runs.Load(), "the handler must not run for an unidentified caller")
}

func TestKeysNeverCrossCallers(t *testing.T) {
	h := &counter{}
	srv := serve(t, openDB(t, newClock(), nil), nil, h)
	body := []byte(`{"amount":5}`)
	alice := send(t, srv, call{key: "shared", user: "alice", body: body})
	bob := send(t, srv, call{key: "shared", user: "bob", body: body})
	require.Equal(t, "run 1 for alice", string(alice.body))
	require.Equal(t, "run 2 for bob", string(bob.body), "bob must not be served alice's response")
	require.False(t, bob.replayed())
	// Each replays their own.
	require.Equal(t, alice.body, send(t, srv, call{key: "shared", user: "alice", body: body}).body)
	require.Equal(t, bob.body, send(t, srv, call{key: "shared", user: "bob", body: body}).body)
	// Another body under bob's key is reuse for bob, whatever alice did.
	require.Equal(t, http.StatusUnprocessableEntity, send(t, srv, call{key: "shared", user: "bob", body: []byte("x")}).status)
	require.EqualValues(t, 2, h.runs.Load())
}

func TestFingerprintMismatchIs422(t *testing.T) {
	h := &counter{}
	srv := serve(t, openDB(t, newClock(), nil), &idemhttp.Options{FingerprintHeaders: []string{"content-type"}}, h)
	base := call{key: "k", user: "alice", path: "/pay?currency=eur", body: []byte(`{"amount":12}`),
		header: http.Header{"Content-Type": {"application/json"}}}
	require.Equal(t, http.StatusCreated, send(t, srv, base).status)

	variants := map[string]func(c *call){
		"body":         func(c *call) { c.body = []byte(`{"amount":13}`) },
		"path":         func(c *call) { c.path = "/refund?currency=eur" },
		"query":        func(c *call) { c.path = "/pay?currency=usd" },
		"method":       func(c *call) { c.method = http.MethodPatch },
		"content type": func(c *call) { c.header = http.Header{"Content-Type": {"text/plain"}} },
		"empty body":   func(c *call) { c.body = nil },
	}
	for name, change := range variants {
		t.Run(name, func(t *testing.T) {
			c := base
			change(&c)
			rep := send(t, srv, c)
			require.Equal(t, http.StatusUnprocessableEntity, rep.status)
			typ, _ := problemOf(t, rep)
			require.Equal(t, idemhttp.ProblemKeyReuse, typ)
		})
	}
	// A header that is not in the fingerprint does not matter.
	c := base
	c.header = http.Header{"Content-Type": {"application/json"}, "X-Trace": {"other"}}
	require.True(t, send(t, srv, c).replayed())
	require.EqualValues(t, 1, h.runs.Load())
}

func TestBodyOverLimitIs413BeforeAnythingIsRecorded(t *testing.T) {
	h := &counter{}
	srv := serve(t, openDB(t, newClock(), nil), &idemhttp.Options{MaxBodyBytes: 100}, h)
	big := bytes.Repeat([]byte("x"), 101)
	rep := send(t, srv, call{key: "k", user: "alice", body: big})
	require.Equal(t, http.StatusRequestEntityTooLarge, rep.status)
	typ, _ := problemOf(t, rep)
	require.Equal(t, idemhttp.ProblemBodyTooLarge, typ)

	// Without a Content-Length (chunked), the limit holds while reading.
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/pay", io.MultiReader(bytes.NewReader(big)))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "k")
	req.Header.Set("X-User", "alice")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	require.Zero(t, h.runs.Load())

	// Nothing was recorded: the same key with a body within the limit is
	// a first request, not a reuse.
	ok := send(t, srv, call{key: "k", user: "alice", body: big[:100]})
	require.Equal(t, http.StatusCreated, ok.status)
	require.False(t, ok.replayed())
}

// blocker is a handler that signals when it starts and waits for release
// (or its request's end) before answering 201.
type blocker struct {
	started chan struct{}
	release chan struct{}
	once    sync.Once
	runs    int
	mu      sync.Mutex
}

func newBlocker() *blocker {
	return &blocker{started: make(chan struct{}, 64), release: make(chan struct{})}
}

// free lets every run of the handler answer. Tests also defer it, so that
// a failed test does not leave a handler blocking the server's Close.
func (b *blocker) free() { b.once.Do(func() { close(b.release) }) }

func (b *blocker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.runs++
	n := b.runs
	b.mu.Unlock()
	b.started <- struct{}{}
	select {
	case <-b.release:
	case <-r.Context().Done():
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, "run "+strconv.Itoa(n))
}

func (b *blocker) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.runs
}

func TestInProgressIs409WithRetryAfter(t *testing.T) {
	b := newBlocker()
	defer b.free()
	srv := serve(t, openDB(t, newClock(), nil), &idemhttp.Options{Lease: 90 * time.Second}, b)
	c := call{key: "k", user: "alice"}
	done := make(chan reply)
	go func() {
		rep, _ := trySend(context.Background(), srv, c)
		done <- rep
	}()
	<-b.started

	// The first request is held until this one has its answer, so an
	// answer at all shows that the 409 did not wait for it.
	rep := send(t, srv, c)
	require.Equal(t, http.StatusConflict, rep.status)
	typ, _ := problemOf(t, rep)
	require.Equal(t, idemhttp.ProblemInProgress, typ)
	// No time has passed on the store's clock: the remaining lease is the
	// whole lease (TestRetryAfterIsTheRemainingLease moves the clock).
	require.Equal(t, "90", rep.header.Get("Retry-After"))

	b.free()
	first := <-done
	require.Equal(t, http.StatusCreated, first.status)
	again := send(t, srv, c)
	require.True(t, again.replayed())
	require.Equal(t, first.body, again.body)
	require.Equal(t, 1, b.count())
}

// leaseErr is an error carrying a lease end, as ErrInProgress will.
type leaseErr struct{ until time.Time }

func (e leaseErr) Error() string         { return "held" }
func (e leaseErr) LeaseUntil() time.Time { return e.until }

func TestRetryAfterUsesTheLeaseEndWhenKnown(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	wrapped := errors.Join(oncekv.ErrInProgress, leaseErr{now.Add(2500 * time.Millisecond)})
	require.Equal(t, 2500*time.Millisecond, idemhttp.RetryAfter(wrapped, now, time.Minute))
	require.Equal(t, time.Minute, idemhttp.RetryAfter(oncekv.ErrInProgress, now, time.Minute))
	require.Equal(t, time.Minute, idemhttp.RetryAfter(leaseErr{}, now, time.Minute), "a zero lease end is unknown")
	for d, want := range map[time.Duration]int64{-time.Second: 1, 0: 1, time.Millisecond: 1, time.Second: 1, 1001 * time.Millisecond: 2, time.Minute: 60, math.MaxInt64: math.MaxInt64/int64(time.Second) + 1} {
		require.Equal(t, want, idemhttp.RetryAfterSeconds(d), "%v", d)
	}
}

func TestHeartbeatKeepsTheKeyPastTheLease(t *testing.T) {
	clk := newClock()
	db := openDB(t, clk, nil)
	b := newBlocker()
	defer b.free()
	srv := serve(t, db, &idemhttp.Options{Lease: time.Minute, Heartbeat: time.Millisecond}, b)
	c := call{key: "k", user: "alice"}
	done := make(chan reply)
	go func() {
		rep, _ := trySend(context.Background(), srv, c)
		done <- rep
	}()
	<-b.started
	// Five leases pass while the handler runs; after each step, wait for
	// a heartbeat's write transaction to read the new time, so the lease
	// now ends a minute after it.
	for range 5 {
		clk.Add(50 * time.Second)
		seen := clk.reads.Load()
		require.Eventually(t, func() bool { return clk.reads.Load() > seen+1 }, 10*time.Second, time.Millisecond)
		require.Equal(t, http.StatusConflict, send(t, srv, c).status, "the running handler's key was taken over")
	}
	b.free()
	require.Equal(t, http.StatusCreated, (<-done).status)
	require.Equal(t, 1, b.count())
}

func TestWithoutHeartbeatAnExpiredLeaseIsTakenOver(t *testing.T) {
	// The converse of the test above, so that it can fail: a handler that
	// runs past its lease with no heartbeat in time loses its key to a
	// retry, which runs the handler again.
	clk := newClock()
	b := newBlocker()
	defer b.free()
	srv := serve(t, openDB(t, clk, nil), &idemhttp.Options{Lease: 2 * time.Hour, Heartbeat: time.Hour}, b)
	c := call{key: "k", user: "alice"}
	go func() { _, _ = trySend(context.Background(), srv, c) }()
	<-b.started
	clk.Add(3 * time.Hour)
	go func() { _, _ = trySend(context.Background(), srv, c) }()
	<-b.started // the retry took the key over and runs the handler
	b.free()
	require.Equal(t, 2, b.count())
}

func TestReplayIsByteForByte(t *testing.T) {
	body := make([]byte, 256*4)
	for i := range body {
		body[i] = byte(i)
	}
	handler := func(runs *int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			*runs++
			h := w.Header()
			h.Set("Content-Type", "application/octet-stream")
			h.Set("Location", "/orders/7")
			h.Set("ETag", `"v1"`)
			h.Set("X-Other", "kept only when listed")
			h.Add("Set-Cookie", "session=secret; HttpOnly")
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write(body[:100]) // in two writes
			_, _ = w.Write(body[100:])
		}
	}
	t.Run("default allowlist", func(t *testing.T) {
		var runs int
		srv := serve(t, openDB(t, newClock(), nil), nil, handler(&runs))
		first := send(t, srv, call{key: "k", user: "alice"})
		require.Equal(t, "session=secret; HttpOnly", first.header.Get("Set-Cookie"), "the first client gets every header")
		rep := send(t, srv, call{key: "k", user: "alice"})
		require.Equal(t, http.StatusAccepted, rep.status)
		require.Equal(t, body, rep.body)
		require.Equal(t, first.body, rep.body)
		for _, name := range []string{"Content-Type", "Location", "Etag"} {
			require.Equal(t, first.header.Values(name), rep.header.Values(name), name)
		}
		require.Empty(t, rep.header.Values("Set-Cookie"), "Set-Cookie is never replayed by default")
		require.Empty(t, rep.header.Values("X-Other"))
		require.True(t, rep.replayed())
		require.Equal(t, 1, runs)
	})
	t.Run("listed headers", func(t *testing.T) {
		var runs int
		srv := serve(t, openDB(t, newClock(), nil), &idemhttp.Options{ReplayHeaders: []string{"x-other", "Set-Cookie"}}, handler(&runs))
		first := send(t, srv, call{key: "k", user: "alice"})
		rep := send(t, srv, call{key: "k", user: "alice"})
		require.Equal(t, first.header.Values("X-Other"), rep.header.Values("X-Other"))
		require.Equal(t, first.header.Values("Set-Cookie"), rep.header.Values("Set-Cookie"))
		require.Equal(t, body, rep.body)
		require.Equal(t, 1, runs)
	})
}

func TestWhatIsStored(t *testing.T) {
	cases := []struct {
		status int
		store  func(int) bool
		runs   int64 // after two identical requests
	}{
		{http.StatusOK, nil, 1},
		{http.StatusCreated, nil, 1},
		{http.StatusSeeOther, nil, 1},
		{http.StatusBadRequest, nil, 1},
		{http.StatusNotFound, nil, 1},
		{http.StatusInternalServerError, nil, 2},
		{http.StatusBadGateway, nil, 2},
		{http.StatusServiceUnavailable, nil, 2},
		// Configured per status.
		{http.StatusServiceUnavailable, func(s int) bool { return s < 500 || s == 503 }, 1},
		{http.StatusNotFound, func(s int) bool { return s < 400 }, 2},
	}
	for _, tc := range cases {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			h := &counter{status: tc.status}
			srv := serve(t, openDB(t, newClock(), nil), &idemhttp.Options{Store: tc.store}, h)
			first := send(t, srv, call{key: "k", user: "alice"})
			second := send(t, srv, call{key: "k", user: "alice"})
			require.Equal(t, tc.status, first.status)
			require.Equal(t, tc.status, second.status)
			require.Equal(t, tc.runs, h.runs.Load())
			require.Equal(t, tc.runs == 1, second.replayed())
		})
	}
}

func TestHandlerThatWritesNothingStoresA200(t *testing.T) {
	var runs int
	srv := serve(t, openDB(t, newClock(), nil), nil, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runs++ }))
	require.Equal(t, http.StatusOK, send(t, srv, call{key: "k", user: "alice"}).status)
	rep := send(t, srv, call{key: "k", user: "alice"})
	require.Equal(t, http.StatusOK, rep.status)
	require.True(t, rep.replayed())
	require.Empty(t, rep.body)
	require.Equal(t, 1, runs)
}

func TestPanicOrGoexitReleasesTheKey(t *testing.T) {
	for name, die := range map[string]func(){
		"panic":  func() { panic("handler bug") },
		"abort":  func() { panic(http.ErrAbortHandler) },
		"goexit": runtime.Goexit,
	} {
		t.Run(name, func(t *testing.T) {
			db := openDB(t, newClock(), nil)
			var mu sync.Mutex
			runs := 0
			srv := serve(t, db, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				runs++
				n := runs
				mu.Unlock()
				stage(t, r, put("orders", "o"+strconv.Itoa(n), "paid"))
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, "partial")
				if n == 1 {
					die()
				}
			}))
			srv.Config.ErrorLog = quietLog()
			_, err := trySend(context.Background(), srv, call{key: "k", user: "alice"})
			require.Error(t, err, "the client must not get a clean answer from a handler that died")
			rep := send(t, srv, call{key: "k", user: "alice"})
			require.Equal(t, http.StatusCreated, rep.status, "the retry runs the handler again at once")
			require.False(t, rep.replayed())
			require.Equal(t, 2, runs)
			require.Equal(t, []string{"o2"}, keys(t, db, "orders"), "the dead handler's staged write must not commit")
		})
	}
}

func TestClientGoneStoresNothing(t *testing.T) {
	db := openDB(t, newClock(), nil)
	b := newBlocker()
	defer b.free()
	finished := make(chan struct{}, 4)
	mw, err := idemhttp.New(db, &idemhttp.Options{Scope: userScope})
	require.NoError(t, err)
	inner := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stage(t, r, put("orders", "o", "paid"))
		b.ServeHTTP(w, r)
	}))
	srv := serveRaw(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.ServeHTTP(w, r)
		finished <- struct{}{} // the middleware is done with the request
	}))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := trySend(ctx, srv, call{key: "k", user: "alice"})
		errc <- err
	}()
	<-b.started
	cancel() // the client goes away; the handler still answers 201
	require.Error(t, <-errc)
	<-finished
	require.Empty(t, keys(t, db, "orders"), "a response nobody received is not committed")

	b.free()
	rep := send(t, srv, call{key: "k", user: "alice"})
	require.Equal(t, http.StatusCreated, rep.status)
	require.False(t, rep.replayed(), "the retry runs the handler again")
	require.Equal(t, 2, b.count())
	require.Equal(t, []string{"o"}, keys(t, db, "orders"))
}

func TestStagedWritesCommitWithTheResponse(t *testing.T) {
	db := openDB(t, newClock(), nil)
	var runs int
	srv := serve(t, db, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		// Staged from another goroutine, while the handler runs.
		var wg sync.WaitGroup
		wg.Go(func() { stage(t, r, put("orders", "o1", "paid")) })
		wg.Wait()
		stage(t, r, put("audit", idemhttp.Key(r), "charged"))
		w.WriteHeader(http.StatusCreated)
	}))
	require.Equal(t, http.StatusCreated, send(t, srv, call{key: "k", user: "alice"}).status)
	require.True(t, send(t, srv, call{key: "k", user: "alice"}).replayed())
	require.Equal(t, 1, runs)
	require.Equal(t, []string{"o1"}, keys(t, db, "orders"))
	require.Len(t, keys(t, db, "audit"), 1)
}

func TestFailedStagedWriteStoresNothing(t *testing.T) {
	for name, fail := range map[string]error{
		"transient": errors.New("disk says no"),
		"permanent": oncekv.Permanent(errors.New("no, never")),
	} {
		t.Run(name, func(t *testing.T) {
			db := openDB(t, newClock(), nil)
			var runs int
			var logged bytes.Buffer
			srv := serve(t, db, &idemhttp.Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs++
				stage(t, r, put("orders", "o"+strconv.Itoa(runs), "paid"))
				if runs == 1 {
					stage(t, r, func(*oncekv.Tx) error { return fail })
				}
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, "ok "+strconv.Itoa(runs))
			}))
			rep := send(t, srv, call{key: "k", user: "alice"})
			require.Equal(t, http.StatusInternalServerError, rep.status)
			typ, _ := problemOf(t, rep)
			require.Equal(t, idemhttp.ProblemStoreFailed, typ)
			require.Empty(t, keys(t, db, "orders"))
			require.Contains(t, logged.String(), "level=ERROR")
			require.Contains(t, logged.String(), fail.Error(), "the log names the staged write's error")

			rep = send(t, srv, call{key: "k", user: "alice"})
			require.Equal(t, http.StatusCreated, rep.status, "the key was released, even for a Permanent staged error")
			require.Equal(t, "ok 2", string(rep.body))
			require.Equal(t, []string{"o2"}, keys(t, db, "orders"))
		})
	}
}

func TestStagedWritesOfAResponseNotStoredAreDropped(t *testing.T) {
	db := openDB(t, newClock(), nil)
	srv := serve(t, db, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stage(t, r, put("orders", "o", "paid"))
		w.WriteHeader(http.StatusBadGateway)
	}))
	require.Equal(t, http.StatusBadGateway, send(t, srv, call{key: "k", user: "alice"}).status)
	require.Empty(t, keys(t, db, "orders"))
}

func TestStageErrors(t *testing.T) {
	db := openDB(t, newClock(), nil)
	saved := make(chan *http.Request, 1)
	var noClaim, nilStage error
	var keyWithout string
	var tokenWithout uint64 = 1
	srv := serve(t, db, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == "" {
			noClaim = idemhttp.Stage(r, put("orders", "o", "x"))
			keyWithout, tokenWithout = idemhttp.Key(r), idemhttp.Token(r)
			return
		}
		nilStage = idemhttp.Stage(r, nil)
		saved <- r
	}))
	send(t, srv, call{user: "alice"})
	require.ErrorIs(t, noClaim, idemhttp.ErrNoClaim)
	require.Empty(t, keyWithout)
	require.Zero(t, tokenWithout)
	send(t, srv, call{user: "alice", key: "k"})
	require.ErrorIs(t, nilStage, idemhttp.ErrNilStage)
	late := idemhttp.Stage(<-saved, put("orders", "late", "x"))
	require.ErrorIs(t, late, idemhttp.ErrStageClosed)
	require.True(t, strings.HasPrefix(late.Error(), "oncekv: "))
	require.ErrorIs(t, idemhttp.Stage(nil, put("orders", "o", "x")), idemhttp.ErrNoClaim)
	require.Empty(t, keys(t, db, "orders"))
}

func TestKeyIsStableAndTokenFences(t *testing.T) {
	type seen struct {
		key   string
		token uint64
	}
	var mu sync.Mutex
	var got []seen
	srv := serve(t, openDB(t, newClock(), nil), nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, seen{idemhttp.Key(r), idemhttp.Token(r)})
		n := len(got)
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // not stored: the retry runs again
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	send(t, srv, call{key: "k", user: "alice"})
	send(t, srv, call{key: "k", user: "alice"})
	send(t, srv, call{key: "k", user: "bob"})
	send(t, srv, call{key: "k2", user: "alice"})
	require.Len(t, got, 4)
	require.NotEmpty(t, got[0].key)
	require.Equal(t, got[0].key, got[1].key, "a retry carries the same key downstream")
	require.Greater(t, got[1].token, got[0].token, "a retry carries a greater token")
	require.NotEqual(t, got[0].key, got[2].key, "another caller, another key")
	require.NotEqual(t, got[0].key, got[3].key)
	require.NotEqual(t, strconv.FormatUint(got[1].token, 10), got[1].key, "the token is never the key")
}

func TestConcurrentIdenticalRequestsRunOnce(t *testing.T) {
	b := newBlocker()
	defer b.free()
	srv := serve(t, openDB(t, newClock(), nil), nil, b)
	c := call{key: "k", user: "alice", body: []byte(`{"amount":1}`)}
	const n = 50
	type result struct {
		rep reply
		err error
	}
	results := make(chan result, n)
	wave := func() {
		for range n {
			go func() {
				rep, err := trySend(context.Background(), srv, c)
				results <- result{rep, err}
			}()
		}
	}
	wave()
	// One request runs the handler, held until every other one has had
	// its answer: each must be a 409, at once.
	<-b.started
	for range n - 1 {
		r := <-results
		require.NoError(t, r.err)
		require.Equal(t, http.StatusConflict, r.rep.status, "body: %s", r.rep.body)
		require.NotEmpty(t, r.rep.header.Get("Retry-After"))
	}
	b.free()
	r := <-results
	require.NoError(t, r.err)
	original := r.rep
	require.Equal(t, http.StatusCreated, original.status)
	require.Equal(t, "run 1", string(original.body))

	wave() // the second wave gets the original back, every one
	for range n {
		r := <-results
		require.NoError(t, r.err)
		require.Equal(t, http.StatusCreated, r.rep.status)
		require.Equal(t, original.body, r.rep.body)
		require.True(t, r.rep.replayed())
	}
	require.Equal(t, 1, b.count())
}

func TestFlushStreamsAndStillStores(t *testing.T) {
	db := openDB(t, newClock(), nil)
	proceed := make(chan struct{})
	var runs int
	srv := serve(t, db, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		stage(t, r, put("orders", "o", "paid"))
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "part one;")
		check(t, http.NewResponseController(w).Flush())
		<-proceed
		_, _ = io.WriteString(w, "part two")
	}))
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/pay", nil)
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "k")
	req.Header.Set("X-User", "alice")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err, "the status must arrive while the handler still runs")
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	head := make([]byte, len("part one;"))
	_, err = io.ReadFull(resp.Body, head)
	require.NoError(t, err)
	require.Equal(t, "part one;", string(head))
	close(proceed)
	rest, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, "part two", string(rest))

	rep := send(t, srv, call{key: "k", user: "alice"})
	require.True(t, rep.replayed())
	require.Equal(t, "part one;part two", string(rep.body))
	require.Equal(t, "text/plain", rep.header.Get("Content-Type"))
	require.Equal(t, 1, runs)
	require.Equal(t, []string{"o"}, keys(t, db, "orders"))
}

func TestCommitFailureAfterFlushAbortsTheConnection(t *testing.T) {
	db := openDB(t, newClock(), nil)
	var runs int
	srv := serve(t, db, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		if runs == 1 {
			stage(t, r, func(*oncekv.Tx) error { return errors.New("no") })
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "streamed")
		w.(http.Flusher).Flush()
	}))
	srv.Config.ErrorLog = quietLog()
	_, err := trySend(context.Background(), srv, call{key: "k", user: "alice"})
	require.Error(t, err, "a streamed response whose commit failed must not end cleanly")
	rep := send(t, srv, call{key: "k", user: "alice"})
	require.Equal(t, http.StatusCreated, rep.status)
	require.False(t, rep.replayed(), "the key was released")
	require.Equal(t, 2, runs)
}

func TestBodyOverRecordCapStreamsAndIsOmitted(t *testing.T) {
	db := openDB(t, newClock(), nil)
	var runs int
	big := bytes.Repeat([]byte("0123456789"), 10)
	srv := serve(t, db, &idemhttp.Options{MaxRecordBytes: 64}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		stage(t, r, put("orders", "o", "paid"))
		w.Header().Set("Location", "/orders/o")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(big[:50])
		_, _ = w.Write(big[50:])
	}))
	first := send(t, srv, call{key: "k", user: "alice"})
	require.Equal(t, big, first.body, "the first client gets the whole body")
	rep := send(t, srv, call{key: "k", user: "alice"})
	require.Equal(t, http.StatusCreated, rep.status)
	require.True(t, rep.replayed())
	require.Equal(t, "true", rep.header.Get("Idempotent-Replay-Body-Omitted"))
	require.Equal(t, "/orders/o", rep.header.Get("Location"))
	require.Empty(t, rep.body)
	require.Equal(t, 1, runs)
	require.Equal(t, []string{"o"}, keys(t, db, "orders"))
}

func TestDedupLastsTheRetentionWindow(t *testing.T) {
	clk := newClock()
	db := openDB(t, clk, &oncekv.Options{ExpireInterval: -1, Retention: 2 * time.Hour, WindowSpan: time.Hour})
	h := &counter{}
	srv := serve(t, db, nil, h)
	c := call{key: "k", user: "alice"}
	send(t, srv, c)
	clk.Add(90 * time.Minute)
	_, err := db.Expire(context.Background())
	require.NoError(t, err)
	require.True(t, send(t, srv, c).replayed(), "within retention the response is replayed")
	clk.Add(3 * time.Hour)
	_, err = db.Expire(context.Background())
	require.NoError(t, err)
	rep := send(t, srv, c)
	require.False(t, rep.replayed(), "after retention the key is new again")
	require.EqualValues(t, 2, h.runs.Load())
}

func TestProblemDetailsPerCase(t *testing.T) {
	b := newBlocker()
	defer b.free()
	srv := serve(t, openDB(t, newClock(), nil), &idemhttp.Options{RequireKey: true, MaxBodyBytes: 10}, b)
	go func() { _, _ = trySend(context.Background(), srv, call{key: "busy", user: "alice"}) }()
	<-b.started
	cases := []struct {
		c      call
		status int
		typ    string
	}{
		{call{user: "alice"}, 400, idemhttp.ProblemKeyMissing},
		{call{user: "alice", key: `"x`}, 400, idemhttp.ProblemKeyInvalid},
		{call{key: "k"}, 401, idemhttp.ProblemUnidentified},
		{call{key: "busy", user: "alice"}, 409, idemhttp.ProblemInProgress},
		{call{key: "k", user: "alice", body: []byte("01234567890")}, 413, idemhttp.ProblemBodyTooLarge},
		{call{key: "busy", user: "alice", body: []byte("x")}, 422, idemhttp.ProblemKeyReuse},
	}
	types := map[string]bool{}
	for _, tc := range cases {
		rep := send(t, srv, tc.c)
		require.Equal(t, tc.status, rep.status, "%+v: %s", tc.c, rep.body)
		typ, _ := problemOf(t, rep)
		require.Equal(t, tc.typ, typ)
		types[typ] = true
	}
	require.Len(t, types, len(cases), "a type URI per case")
	require.Equal(t, 1, b.count())
}

func TestClosedStoreIs503(t *testing.T) {
	clk := newClock()
	db, err := oncekv.Open(t.TempDir()+"/c.db", &oncekv.Options{ExpireInterval: -1, Now: clk.Now})
	require.NoError(t, err)
	h := &counter{}
	srv := serve(t, db, nil, h)
	require.NoError(t, db.Close())
	rep := send(t, srv, call{key: "k", user: "alice"})
	require.Equal(t, http.StatusServiceUnavailable, rep.status)
	typ, _ := problemOf(t, rep)
	require.Equal(t, idemhttp.ProblemUnavailable, typ)
	require.Zero(t, h.runs.Load())
}

func TestInformationalAndTrailersAreNotStored(t *testing.T) {
	var runs int
	srv := serve(t, openDB(t, newClock(), nil), nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("Trailer", "X-Checksum")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "body")
		w.Header().Set("X-Checksum", "abc")
	}))
	do := func() (hints int, resp *http.Response, body []byte) {
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
			if code == http.StatusEarlyHints {
				hints++
			}
			return nil
		}}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodPost, srv.URL+"/pay", nil)
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "k")
		req.Header.Set("X-User", "alice")
		resp, err = srv.Client().Do(req)
		require.NoError(t, err)
		body, err = io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return hints, resp, body
	}
	hints, first, body := do()
	require.Equal(t, 1, hints, "the first client gets the 103")
	require.Equal(t, http.StatusCreated, first.StatusCode)
	require.Equal(t, "abc", first.Trailer.Get("X-Checksum"), "the first client gets the trailer")
	hints, again, body2 := do()
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.Zero(t, hints, "a 1xx is not replayed")
	require.Empty(t, again.Trailer.Get("X-Checksum"), "a trailer is not replayed")
	require.Equal(t, body, body2)
	require.Equal(t, 1, runs)
}
