package idemhttptest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
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

func testFirstRequestStoredThenReplayed(t *testing.T, e *env) {
	h := &Counter{}
	srv := e.serve(t, nil, h)
	c := Call{Key: "k1", User: "alice", Body: []byte(`{"amount":12}`)}

	first := Send(t, srv, c)
	require.Equal(t, http.StatusCreated, first.Status)
	require.Equal(t, "run 1 for alice", string(first.Body))
	require.False(t, first.Replayed())

	again := Send(t, srv, c)
	require.Equal(t, http.StatusCreated, again.Status)
	require.Equal(t, first.Body, again.Body)
	require.True(t, again.Replayed())
	require.EqualValues(t, 1, h.Runs.Load())
}

func testMethodsCovered(t *testing.T, e *env) {
	h := &Counter{}
	srv := e.serve(t, nil, h)
	// GET and PUT are not covered by default: the key is ignored.
	for _, m := range []string{http.MethodGet, http.MethodPut} {
		Send(t, srv, Call{Method: m, Key: "k", User: "alice"})
		Send(t, srv, Call{Method: m, Key: "k", User: "alice"})
	}
	require.EqualValues(t, 4, h.Runs.Load())
	// PATCH is.
	Send(t, srv, Call{Method: http.MethodPatch, Key: "p", User: "alice"})
	require.True(t, Send(t, srv, Call{Method: http.MethodPatch, Key: "p", User: "alice"}).Replayed())
	require.EqualValues(t, 5, h.Runs.Load())

	// Configured: PUT only.
	h2 := &Counter{}
	srv2 := e.fresh(t).serve(t, &idemhttp.Options{Methods: []string{http.MethodPut}}, h2)
	Send(t, srv2, Call{Method: http.MethodPut, Key: "k", User: "alice"})
	require.True(t, Send(t, srv2, Call{Method: http.MethodPut, Key: "k", User: "alice"}).Replayed())
	Send(t, srv2, Call{Key: "k", User: "alice"})
	Send(t, srv2, Call{Key: "k", User: "alice"})
	require.EqualValues(t, 3, h2.Runs.Load())
}

func testMissingKey(t *testing.T, e *env) {
	h := &Counter{}
	srv := e.serve(t, nil, h)
	require.Equal(t, http.StatusCreated, Send(t, srv, Call{User: "alice"}).Status)
	require.Equal(t, http.StatusCreated, Send(t, srv, Call{User: "alice"}).Status)
	require.EqualValues(t, 2, h.Runs.Load(), "without a key, requests pass through")

	h2 := &Counter{}
	srv2 := e.fresh(t).serve(t, &idemhttp.Options{RequireKey: true}, h2)
	rep := Send(t, srv2, Call{User: "alice"})
	require.Equal(t, http.StatusBadRequest, rep.Status)
	typ, _ := ProblemOf(t, rep)
	require.Equal(t, idemhttp.ProblemKeyMissing, typ)
	require.Zero(t, h2.Runs.Load())
}

func testMalformedKey(t *testing.T, e *env) {
	h := &Counter{}
	srv := e.serve(t, nil, h)
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
			rep := Send(t, srv, Call{User: "alice", Header: http.Header{"Idempotency-Key": hdr}})
			require.Equal(t, http.StatusBadRequest, rep.Status)
			typ, _ := ProblemOf(t, rep)
			require.Equal(t, idemhttp.ProblemKeyInvalid, typ)
		})
	}
	require.Zero(t, h.Runs.Load())

	// The draft's quoted form and the bare form name the same key.
	Send(t, srv, Call{User: "alice", Key: "order-7"})
	rep := Send(t, srv, Call{User: "alice", Key: `"order-7"`})
	require.True(t, rep.Replayed())
	require.Equal(t, http.StatusCreated, Send(t, srv, Call{User: "alice", Key: strings.Repeat("k", idemhttp.MaxKeyLen)}).Status)
	require.EqualValues(t, 2, h.Runs.Load())
}

func testScopeIdentifiesTheCaller(t *testing.T, e *env) {
	h := &Counter{}
	srv := e.serve(t, nil, h)
	rep := Send(t, srv, Call{Key: "k"}) // no X-User: Scope fails
	require.Equal(t, http.StatusUnauthorized, rep.Status)
	typ, _ := ProblemOf(t, rep)
	require.Equal(t, idemhttp.ProblemUnidentified, typ)

	srvEmpty := e.fresh(t).serve(t, &idemhttp.Options{
		Scope: func(*http.Request) (string, error) { return "", nil },
	}, h)
	require.Equal(t, http.StatusUnauthorized, Send(t, srvEmpty, Call{Key: "k", User: "alice"}).Status)
	require.Zero(t, h.Runs.Load(), "the handler must not run for an unidentified caller")
}

func testKeysNeverCrossCallers(t *testing.T, e *env) {
	h := &Counter{}
	srv := e.serve(t, nil, h)
	body := []byte(`{"amount":5}`)
	alice := Send(t, srv, Call{Key: "shared", User: "alice", Body: body})
	bob := Send(t, srv, Call{Key: "shared", User: "bob", Body: body})
	require.Equal(t, "run 1 for alice", string(alice.Body))
	require.Equal(t, "run 2 for bob", string(bob.Body), "bob must not be served alice's response")
	require.False(t, bob.Replayed())
	// Each replays their own.
	require.Equal(t, alice.Body, Send(t, srv, Call{Key: "shared", User: "alice", Body: body}).Body)
	require.Equal(t, bob.Body, Send(t, srv, Call{Key: "shared", User: "bob", Body: body}).Body)
	// Another body under bob's key is reuse for bob, whatever alice did.
	require.Equal(t, http.StatusUnprocessableEntity, Send(t, srv, Call{Key: "shared", User: "bob", Body: []byte("x")}).Status)
	require.EqualValues(t, 2, h.Runs.Load())
}

func testFingerprintMismatchIs422(t *testing.T, e *env) {
	h := &Counter{}
	srv := e.serve(t, &idemhttp.Options{FingerprintHeaders: []string{"content-type"}}, h)
	base := Call{Key: "k", User: "alice", Path: "/pay?currency=eur", Body: []byte(`{"amount":12}`),
		Header: http.Header{"Content-Type": {"application/json"}}}
	require.Equal(t, http.StatusCreated, Send(t, srv, base).Status)

	variants := map[string]func(c *Call){
		"body":         func(c *Call) { c.Body = []byte(`{"amount":13}`) },
		"path":         func(c *Call) { c.Path = "/refund?currency=eur" },
		"query":        func(c *Call) { c.Path = "/pay?currency=usd" },
		"method":       func(c *Call) { c.Method = http.MethodPatch },
		"content type": func(c *Call) { c.Header = http.Header{"Content-Type": {"text/plain"}} },
		"empty body":   func(c *Call) { c.Body = nil },
	}
	for name, change := range variants {
		t.Run(name, func(t *testing.T) {
			c := base
			change(&c)
			rep := Send(t, srv, c)
			require.Equal(t, http.StatusUnprocessableEntity, rep.Status)
			typ, _ := ProblemOf(t, rep)
			require.Equal(t, idemhttp.ProblemKeyReuse, typ)
		})
	}
	// A header that is not in the fingerprint does not matter.
	c := base
	c.Header = http.Header{"Content-Type": {"application/json"}, "X-Trace": {"other"}}
	require.True(t, Send(t, srv, c).Replayed())
	require.EqualValues(t, 1, h.Runs.Load())
}

func testBodyOverLimitIs413BeforeAnythingIsRecorded(t *testing.T, e *env) {
	h := &Counter{}
	srv := e.serve(t, &idemhttp.Options{MaxBodyBytes: 100}, h)
	big := bytes.Repeat([]byte("x"), 101)
	rep := Send(t, srv, Call{Key: "k", User: "alice", Body: big})
	require.Equal(t, http.StatusRequestEntityTooLarge, rep.Status)
	typ, _ := ProblemOf(t, rep)
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
	require.Zero(t, h.Runs.Load())

	// Nothing was recorded: the same key with a body within the limit is
	// a first request, not a reuse.
	ok := Send(t, srv, Call{Key: "k", User: "alice", Body: big[:100]})
	require.Equal(t, http.StatusCreated, ok.Status)
	require.False(t, ok.Replayed())
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

func testInProgressIs409WithRetryAfter(t *testing.T, e *env) {
	b := newBlocker()
	defer b.free()
	srv := e.serve(t, &idemhttp.Options{Lease: 90 * time.Second}, b)
	c := Call{Key: "k", User: "alice"}
	done := make(chan Reply)
	go func() {
		rep, _ := TrySend(context.Background(), srv, c)
		done <- rep
	}()
	<-b.started

	// The first request is held until this one has its answer, so an
	// answer at all shows that the 409 did not wait for it.
	rep := Send(t, srv, c)
	require.Equal(t, http.StatusConflict, rep.Status)
	typ, _ := ProblemOf(t, rep)
	require.Equal(t, idemhttp.ProblemInProgress, typ)
	// No time has passed on the store's clock: the remaining lease is the
	// whole lease (TestRetryAfterIsTheRemainingLease moves the clock).
	require.Equal(t, "90", rep.Header.Get("Retry-After"))

	b.free()
	first := <-done
	require.Equal(t, http.StatusCreated, first.Status)
	again := Send(t, srv, c)
	require.True(t, again.Replayed())
	require.Equal(t, first.Body, again.Body)
	require.Equal(t, 1, b.count())
}

func testHeartbeatKeepsTheKeyPastTheLease(t *testing.T, e *env) {
	clk := e.clk
	b := newBlocker()
	defer b.free()
	srv := e.serve(t, &idemhttp.Options{Lease: time.Minute, Heartbeat: time.Millisecond}, b)
	c := Call{Key: "k", User: "alice"}
	done := make(chan Reply)
	go func() {
		rep, _ := TrySend(context.Background(), srv, c)
		done <- rep
	}()
	<-b.started
	// Five leases pass while the handler runs; after each step, wait for
	// a heartbeat's write transaction to read the new time, so the lease
	// now ends a minute after it.
	for range 5 {
		clk.Add(50 * time.Second)
		seen := clk.Reads()
		require.Eventually(t, func() bool { return clk.Reads() > seen+1 }, 10*time.Second, time.Millisecond)
		require.Equal(t, http.StatusConflict, Send(t, srv, c).Status, "the running handler's key was taken over")
	}
	b.free()
	require.Equal(t, http.StatusCreated, (<-done).Status)
	require.Equal(t, 1, b.count())
}

func testWithoutHeartbeatAnExpiredLeaseIsTakenOver(t *testing.T, e *env) {
	// The converse of the test above, so that it can fail: a handler that
	// runs past its lease with no heartbeat in time loses its key to a
	// retry, which runs the handler again.
	clk := e.clk
	b := newBlocker()
	defer b.free()
	srv := e.serve(t, &idemhttp.Options{Lease: 2 * time.Hour, Heartbeat: time.Hour}, b)
	c := Call{Key: "k", User: "alice"}
	go func() { _, _ = TrySend(context.Background(), srv, c) }()
	<-b.started
	clk.Add(3 * time.Hour)
	go func() { _, _ = TrySend(context.Background(), srv, c) }()
	<-b.started // the retry took the key over and runs the handler
	b.free()
	require.Equal(t, 2, b.count())
}

func testReplayIsByteForByte(t *testing.T, e *env) {
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
		e := e.fresh(t)
		var runs int
		srv := e.serve(t, nil, handler(&runs))
		first := Send(t, srv, Call{Key: "k", User: "alice"})
		require.Equal(t, "session=secret; HttpOnly", first.Header.Get("Set-Cookie"), "the first client gets every header")
		rep := Send(t, srv, Call{Key: "k", User: "alice"})
		require.Equal(t, http.StatusAccepted, rep.Status)
		require.Equal(t, body, rep.Body)
		require.Equal(t, first.Body, rep.Body)
		for _, name := range []string{"Content-Type", "Location", "Etag"} {
			require.Equal(t, first.Header.Values(name), rep.Header.Values(name), name)
		}
		require.Empty(t, rep.Header.Values("Set-Cookie"), "Set-Cookie is never replayed by default")
		require.Empty(t, rep.Header.Values("X-Other"))
		require.True(t, rep.Replayed())
		require.Equal(t, 1, runs)
	})
	t.Run("listed headers", func(t *testing.T) {
		e := e.fresh(t)
		var runs int
		srv := e.serve(t, &idemhttp.Options{ReplayHeaders: []string{"x-other", "Set-Cookie"}}, handler(&runs))
		first := Send(t, srv, Call{Key: "k", User: "alice"})
		rep := Send(t, srv, Call{Key: "k", User: "alice"})
		require.Equal(t, first.Header.Values("X-Other"), rep.Header.Values("X-Other"))
		require.Equal(t, first.Header.Values("Set-Cookie"), rep.Header.Values("Set-Cookie"))
		require.Equal(t, body, rep.Body)
		require.Equal(t, 1, runs)
	})
}

func testWhatIsStored(t *testing.T, e *env) {
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
			e := e.fresh(t)
			h := &Counter{Status: tc.status}
			srv := e.serve(t, &idemhttp.Options{Store: tc.store}, h)
			first := Send(t, srv, Call{Key: "k", User: "alice"})
			second := Send(t, srv, Call{Key: "k", User: "alice"})
			require.Equal(t, tc.status, first.Status)
			require.Equal(t, tc.status, second.Status)
			require.Equal(t, tc.runs, h.Runs.Load())
			require.Equal(t, tc.runs == 1, second.Replayed())
		})
	}
}

func testHandlerThatWritesNothingStoresA200(t *testing.T, e *env) {
	var runs int
	srv := e.serve(t, nil, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runs++ }))
	require.Equal(t, http.StatusOK, Send(t, srv, Call{Key: "k", User: "alice"}).Status)
	rep := Send(t, srv, Call{Key: "k", User: "alice"})
	require.Equal(t, http.StatusOK, rep.Status)
	require.True(t, rep.Replayed())
	require.Empty(t, rep.Body)
	require.Equal(t, 1, runs)
}

func testPanicOrGoexitReleasesTheKey(t *testing.T, e *env) {
	for name, die := range map[string]func(){
		"panic":  func() { panic("handler bug") },
		"abort":  func() { panic(http.ErrAbortHandler) },
		"goexit": runtime.Goexit,
	} {
		t.Run(name, func(t *testing.T) {
			e := e.fresh(t)
			var mu sync.Mutex
			runs := 0
			srv := e.serve(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				runs++
				n := runs
				mu.Unlock()
				e.put(t, r, "orders", "o"+strconv.Itoa(n), "paid")
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, "partial")
				if n == 1 {
					die()
				}
			}))
			srv.Config.ErrorLog = QuietLog()
			_, err := TrySend(context.Background(), srv, Call{Key: "k", User: "alice"})
			require.Error(t, err, "the client must not get a clean answer from a handler that died")
			rep := Send(t, srv, Call{Key: "k", User: "alice"})
			require.Equal(t, http.StatusCreated, rep.Status, "the retry runs the handler again at once")
			require.False(t, rep.Replayed())
			require.Equal(t, 2, runs)
			require.Equal(t, []string{"o2"}, e.keys(t, "orders"), "the dead handler's staged write must not commit")
		})
	}
}

func testClientGoneStoresNothing(t *testing.T, e *env) {
	b := newBlocker()
	defer b.free()
	finished := make(chan struct{}, 4)
	mw, err := e.s.New(&idemhttp.Options{Scope: UserScope})
	require.NoError(t, err)
	inner := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.put(t, r, "orders", "o", "paid")
		b.ServeHTTP(w, r)
	}))
	srv := ServeRaw(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.ServeHTTP(w, r)
		finished <- struct{}{} // the middleware is done with the request
	}))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := TrySend(ctx, srv, Call{Key: "k", User: "alice"})
		errc <- err
	}()
	<-b.started
	cancel() // the client goes away; the handler still answers 201
	require.Error(t, <-errc)
	<-finished
	require.Empty(t, e.keys(t, "orders"), "a response nobody received is not committed")

	b.free()
	rep := Send(t, srv, Call{Key: "k", User: "alice"})
	require.Equal(t, http.StatusCreated, rep.Status)
	require.False(t, rep.Replayed(), "the retry runs the handler again")
	require.Equal(t, 2, b.count())
	require.Equal(t, []string{"o"}, e.keys(t, "orders"))
}

func testStagedWritesCommitWithTheResponse(t *testing.T, e *env) {
	var runs int
	srv := e.serve(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		// Staged from another goroutine, while the handler runs.
		var wg sync.WaitGroup
		wg.Go(func() { e.put(t, r, "orders", "o1", "paid") })
		wg.Wait()
		e.put(t, r, "audit", idemhttp.Key(r), "charged")
		w.WriteHeader(http.StatusCreated)
	}))
	require.Equal(t, http.StatusCreated, Send(t, srv, Call{Key: "k", User: "alice"}).Status)
	require.True(t, Send(t, srv, Call{Key: "k", User: "alice"}).Replayed())
	require.Equal(t, 1, runs)
	require.Equal(t, []string{"o1"}, e.keys(t, "orders"))
	require.Len(t, e.keys(t, "audit"), 1)
}

func testFailedStagedWriteStoresNothing(t *testing.T, e *env) {
	for name, fail := range map[string]error{
		"transient": errors.New("disk says no"),
		"permanent": oncekv.Permanent(errors.New("no, never")),
	} {
		t.Run(name, func(t *testing.T) {
			e := e.fresh(t)
			var runs int
			var logged bytes.Buffer
			srv := e.serve(t, &idemhttp.Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs++
				e.put(t, r, "orders", "o"+strconv.Itoa(runs), "paid")
				if runs == 1 {
					e.fail(t, r, fail)
				}
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, "ok "+strconv.Itoa(runs))
			}))
			rep := Send(t, srv, Call{Key: "k", User: "alice"})
			require.Equal(t, http.StatusInternalServerError, rep.Status)
			typ, _ := ProblemOf(t, rep)
			require.Equal(t, idemhttp.ProblemStoreFailed, typ)
			require.Empty(t, e.keys(t, "orders"))
			require.Contains(t, logged.String(), "level=ERROR")
			require.Contains(t, logged.String(), fail.Error(), "the log names the staged write's error")

			rep = Send(t, srv, Call{Key: "k", User: "alice"})
			require.Equal(t, http.StatusCreated, rep.Status, "the key was released, even for a Permanent staged error")
			require.Equal(t, "ok 2", string(rep.Body))
			require.Equal(t, []string{"o2"}, e.keys(t, "orders"))
		})
	}
}

func testStagedWritesOfAResponseNotStoredAreDropped(t *testing.T, e *env) {
	srv := e.serve(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.put(t, r, "orders", "o", "paid")
		w.WriteHeader(http.StatusBadGateway)
	}))
	require.Equal(t, http.StatusBadGateway, Send(t, srv, Call{Key: "k", User: "alice"}).Status)
	require.Empty(t, e.keys(t, "orders"))
}

func testStageErrors(t *testing.T, e *env) {
	saved := make(chan *http.Request, 1)
	var noClaim, nilStage error
	var keyWithout string
	var tokenWithout uint64 = 1
	srv := e.serve(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == "" {
			noClaim = e.s.Put(r, "orders", "o", "x")
			keyWithout, tokenWithout = idemhttp.Key(r), idemhttp.Token(r)
			return
		}
		nilStage = e.s.StageNil(r)
		saved <- r
	}))
	Send(t, srv, Call{User: "alice"})
	require.ErrorIs(t, noClaim, idemhttp.ErrNoClaim)
	require.Empty(t, keyWithout)
	require.Zero(t, tokenWithout)
	Send(t, srv, Call{User: "alice", Key: "k"})
	require.ErrorIs(t, nilStage, idemhttp.ErrNilStage)
	late := e.s.Put(<-saved, "orders", "late", "x")
	require.ErrorIs(t, late, idemhttp.ErrStageClosed)
	require.True(t, strings.HasPrefix(late.Error(), "oncekv: "))
	require.ErrorIs(t, e.s.Put(nil, "orders", "o", "x"), idemhttp.ErrNoClaim)
	require.Empty(t, e.keys(t, "orders"))
}

func testKeyIsStableAndTokenFences(t *testing.T, e *env) {
	type seen struct {
		key   string
		token uint64
	}
	var mu sync.Mutex
	var got []seen
	srv := e.serve(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	Send(t, srv, Call{Key: "k", User: "alice"})
	Send(t, srv, Call{Key: "k", User: "alice"})
	Send(t, srv, Call{Key: "k", User: "bob"})
	Send(t, srv, Call{Key: "k2", User: "alice"})
	require.Len(t, got, 4)
	require.NotEmpty(t, got[0].key)
	require.Equal(t, got[0].key, got[1].key, "a retry carries the same key downstream")
	require.Greater(t, got[1].token, got[0].token, "a retry carries a greater token")
	require.NotEqual(t, got[0].key, got[2].key, "another caller, another key")
	require.NotEqual(t, got[0].key, got[3].key)
	require.NotEqual(t, strconv.FormatUint(got[1].token, 10), got[1].key, "the token is never the key")
}

func testConcurrentIdenticalRequestsRunOnce(t *testing.T, e *env) {
	b := newBlocker()
	defer b.free()
	srv := e.serve(t, nil, b)
	c := Call{Key: "k", User: "alice", Body: []byte(`{"amount":1}`)}
	const n = 50
	type result struct {
		rep Reply
		err error
	}
	results := make(chan result, n)
	wave := func() {
		for range n {
			go func() {
				rep, err := TrySend(context.Background(), srv, c)
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
		require.Equal(t, http.StatusConflict, r.rep.Status, "body: %s", r.rep.Body)
		require.NotEmpty(t, r.rep.Header.Get("Retry-After"))
	}
	b.free()
	r := <-results
	require.NoError(t, r.err)
	original := r.rep
	require.Equal(t, http.StatusCreated, original.Status)
	require.Equal(t, "run 1", string(original.Body))

	wave() // the second wave gets the original back, every one
	for range n {
		r := <-results
		require.NoError(t, r.err)
		require.Equal(t, http.StatusCreated, r.rep.Status)
		require.Equal(t, original.Body, r.rep.Body)
		require.True(t, r.rep.Replayed())
	}
	require.Equal(t, 1, b.count())
}

func testFlushStreamsAndStillStores(t *testing.T, e *env) {
	proceed := make(chan struct{})
	var runs int
	srv := e.serve(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		e.put(t, r, "orders", "o", "paid")
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "part one;")
		Check(t, http.NewResponseController(w).Flush())
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

	rep := Send(t, srv, Call{Key: "k", User: "alice"})
	require.True(t, rep.Replayed())
	require.Equal(t, "part one;part two", string(rep.Body))
	require.Equal(t, "text/plain", rep.Header.Get("Content-Type"))
	require.Equal(t, 1, runs)
	require.Equal(t, []string{"o"}, e.keys(t, "orders"))
}

func testCommitFailureAfterFlushAbortsTheConnection(t *testing.T, e *env) {
	var runs int
	srv := e.serve(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		if runs == 1 {
			e.fail(t, r, errors.New("no"))
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "streamed")
		w.(http.Flusher).Flush()
	}))
	srv.Config.ErrorLog = QuietLog()
	_, err := TrySend(context.Background(), srv, Call{Key: "k", User: "alice"})
	require.Error(t, err, "a streamed response whose commit failed must not end cleanly")
	rep := Send(t, srv, Call{Key: "k", User: "alice"})
	require.Equal(t, http.StatusCreated, rep.Status)
	require.False(t, rep.Replayed(), "the key was released")
	require.Equal(t, 2, runs)
}

func testBodyOverRecordCapStreamsAndIsOmitted(t *testing.T, e *env) {
	var runs int
	big := bytes.Repeat([]byte("0123456789"), 10)
	srv := e.serve(t, &idemhttp.Options{MaxRecordBytes: 64}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		e.put(t, r, "orders", "o", "paid")
		w.Header().Set("Location", "/orders/o")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(big[:50])
		_, _ = w.Write(big[50:])
	}))
	first := Send(t, srv, Call{Key: "k", User: "alice"})
	require.Equal(t, big, first.Body, "the first client gets the whole body")
	rep := Send(t, srv, Call{Key: "k", User: "alice"})
	require.Equal(t, http.StatusCreated, rep.Status)
	require.True(t, rep.Replayed())
	require.Equal(t, "true", rep.Header.Get("Idempotent-Replay-Body-Omitted"))
	require.Equal(t, "/orders/o", rep.Header.Get("Location"))
	require.Empty(t, rep.Body)
	require.Equal(t, 1, runs)
	require.Equal(t, []string{"o"}, e.keys(t, "orders"))
}

func testProblemDetailsPerCase(t *testing.T, e *env) {
	b := newBlocker()
	defer b.free()
	srv := e.serve(t, &idemhttp.Options{RequireKey: true, MaxBodyBytes: 10}, b)
	go func() { _, _ = TrySend(context.Background(), srv, Call{Key: "busy", User: "alice"}) }()
	<-b.started
	cases := []struct {
		c      Call
		status int
		typ    string
	}{
		{Call{User: "alice"}, 400, idemhttp.ProblemKeyMissing},
		{Call{User: "alice", Key: `"x`}, 400, idemhttp.ProblemKeyInvalid},
		{Call{Key: "k"}, 401, idemhttp.ProblemUnidentified},
		{Call{Key: "busy", User: "alice"}, 409, idemhttp.ProblemInProgress},
		{Call{Key: "k", User: "alice", Body: []byte("01234567890")}, 413, idemhttp.ProblemBodyTooLarge},
		{Call{Key: "busy", User: "alice", Body: []byte("x")}, 422, idemhttp.ProblemKeyReuse},
	}
	types := map[string]bool{}
	for _, tc := range cases {
		rep := Send(t, srv, tc.c)
		require.Equal(t, tc.status, rep.Status, "%+v: %s", tc.c, rep.Body)
		typ, _ := ProblemOf(t, rep)
		require.Equal(t, tc.typ, typ)
		types[typ] = true
	}
	require.Len(t, types, len(cases), "a type URI per case")
	require.Equal(t, 1, b.count())
}

func testClosedStoreIs503(t *testing.T, e *env) {
	h := &Counter{}
	srv := e.serve(t, nil, h)
	require.NoError(t, e.s.Close())
	rep := Send(t, srv, Call{Key: "k", User: "alice"})
	require.Equal(t, http.StatusServiceUnavailable, rep.Status)
	typ, _ := ProblemOf(t, rep)
	require.Equal(t, idemhttp.ProblemUnavailable, typ)
	require.Zero(t, h.Runs.Load())
}

func testInformationalAndTrailersAreNotStored(t *testing.T, e *env) {
	var runs int
	srv := e.serve(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
