package relay_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
	"github.com/oncekv/oncekv/retry"
)

// seen is one request as the server got it.
type seen struct {
	method, key, fence, body, contentType, auth string
}

// server answers each request with the status and Retry-After that answer
// returns, and records what it got.
func server(t *testing.T, answer func(n int) (int, string)) (*httptest.Server, func() []seen) {
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		n := len(got)
		got = append(got, seen{r.Method, r.Header.Get("Idempotency-Key"), r.Header.Get("Oncekv-Fence"),
			string(b), r.Header.Get("Content-Type"), r.Header.Get("Authorization")})
		mu.Unlock()
		code, after := answer(n)
		if after != "" {
			w.Header().Set("Retry-After", after)
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []seen {
		mu.Lock()
		defer mu.Unlock()
		return append([]seen(nil), got...)
	}
}

func TestHTTPSenderClassifiesStatuses(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		code       int
		retryAfter string
		ok         bool
		permanent  bool
		after      time.Duration // 0: none expected
	}{
		{code: 200, ok: true},
		{code: 201, ok: true},
		{code: 204, ok: true},
		{code: 409, retryAfter: "2", after: 2 * time.Second},
		{code: 408},
		{code: 429, retryAfter: "7", after: 7 * time.Second},
		{code: 500},
		{code: 503, retryAfter: "Thu, 01 Jan 2026 00:01:00 GMT", after: time.Minute},
		{code: 503, retryAfter: "soon"}, // unparseable: ignored
		{code: 400, permanent: true},
		{code: 404, permanent: true},
		{code: 422, permanent: true},
		{code: 301, permanent: true},
	}
	for _, c := range cases {
		t.Run(http.StatusText(c.code)+" "+c.retryAfter, func(t *testing.T) {
			srv, _ := server(t, func(int) (int, string) { return c.code, c.retryAfter })
			client := srv.Client()
			client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			send, err := relay.HTTPSender(client, "", srv.URL, &relay.HTTPOptions{Now: func() time.Time { return now }})
			require.NoError(t, err)
			err = send(context.Background(), &queue.Message{Key: "k", Body: []byte("b"), Token: 1})
			if c.ok {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			var se *retry.StatusError
			require.ErrorAs(t, err, &se)
			require.Equal(t, c.code, se.Code)
			require.Equal(t, c.permanent, retry.IsPermanent(err))
			d, has := retry.RetryAfter(err)
			require.Equal(t, c.after != 0, has)
			require.Equal(t, c.after, d)
		})
	}
}

func TestHTTPSenderSendsKeyFenceAndBody(t *testing.T) {
	srv, got := server(t, func(int) (int, string) { return 200, "" })
	send, err := relay.HTTPSender(nil, http.MethodPut, srv.URL+"/ingest", &relay.HTTPOptions{
		Header: http.Header{"Authorization": {"Bearer x"}, "Content-Type": {"application/json"}},
	})
	require.NoError(t, err)
	require.NoError(t, send(context.Background(), &queue.Message{Key: "reading-7", Body: []byte(`{"t":21}`), Token: 42}))
	require.Equal(t, []seen{{http.MethodPut, "reading-7", "42", `{"t":21}`, "application/json", "Bearer x"}}, got())
}

func TestHTTPSenderNetworkErrorIsTransient(t *testing.T) {
	srv, _ := server(t, func(int) (int, string) { return 200, "" })
	url := srv.URL
	srv.Close()
	send, err := relay.HTTPSender(nil, "", url, nil)
	require.NoError(t, err)
	err = send(context.Background(), &queue.Message{Key: "k"})
	require.Error(t, err)
	require.False(t, retry.IsPermanent(err))
}

func TestHTTPSenderBadInput(t *testing.T) {
	for _, c := range []struct{ method, url string }{
		{"GET /", "http://x"}, {"POST", "ftp://x/y"}, {"POST", "/relative"}, {"POST", "http://%zz"},
	} {
		_, err := relay.HTTPSender(nil, c.method, c.url, nil)
		require.ErrorIs(t, err, relay.ErrInvalidSender, "%q %q", c.method, c.url)
	}
	_, err := relay.HTTPSender(nil, "", "http://x", &relay.HTTPOptions{KeyHeader: "A", FenceHeader: "a"})
	require.ErrorIs(t, err, relay.ErrInvalidSender)

	srv, got := server(t, func(int) (int, string) { return 200, "" })
	send, err := relay.HTTPSender(nil, "", srv.URL, nil)
	require.NoError(t, err)
	for _, k := range []string{"a\nb", " k", "k\x00"} {
		err = send(context.Background(), &queue.Message{Key: k})
		require.ErrorIs(t, err, relay.ErrInvalidKey)
		require.True(t, retry.IsPermanent(err), "a key that cannot be sent is a dead letter, not a retry loop")
	}
	require.Empty(t, got())
}

// TestRelayThroughHTTPKeepsKeyAcrossRetryAndRedrive: the far side sees one
// Idempotency-Key for every send of a message, a 503's retry, a 422's
// dead letter and its redrive alike, and a new fence each time.
func TestRelayThroughHTTPKeepsKeyAcrossRetryAndRedrive(t *testing.T) {
	e := newEnv(t, nil)
	e.enqueue(t, "r1")
	codes := []int{503, 422, 201}
	srv, got := server(t, func(n int) (int, string) { return codes[n], "1" })
	send, err := relay.HTTPSender(srv.Client(), "", srv.URL, &relay.HTTPOptions{Now: e.clock.Now})
	require.NoError(t, err)
	r := e.relay(t, send, nil)
	run := start(r.Run)
	defer run.stop(t)
	require.Eventually(t, func() bool { return r.Stats().Failed == 1 }, 20*time.Second, time.Millisecond)
	e.quiet(t)
	e.clock.Advance(time.Second) // the 503's Retry-After
	require.Eventually(t, func() bool { return r.Stats().DeadLettered == 1 }, 20*time.Second, time.Millisecond)
	dead, err := e.q.DeadLetters(0, 1)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	_, err = e.q.Redrive(context.Background(), dead[0].ID)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return r.Stats().Sent == 1 }, 20*time.Second, time.Millisecond)

	reqs := got()
	require.Len(t, reqs, 3)
	fences := map[string]bool{}
	for _, s := range reqs {
		require.Equal(t, "r1", s.key)
		require.Equal(t, "body of r1", s.body)
		fences[s.fence] = true
	}
	require.Len(t, fences, 3, "a new fence at every delivery")
}

// TestHTTPSenderErrorSaysWhatTheFarSideAnswered: a dead letter says why:
// the title and detail of a problem+json answer, or the start of a plain
// body, one bounded line, marked when the far side replayed a stored
// answer; the error keeps its class (permanent, Retry-After).
func TestHTTPSenderErrorSaysWhatTheFarSideAnswered(t *testing.T) {
	answers := []func(w http.ResponseWriter){
		func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, `{"type":"about:blank","title":"Invalid note","status":422,"detail":"title must\nnot be empty"}`)
		},
		func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "down for maintenance\r\n"+strings.Repeat("x", 100_000))
		},
		func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadRequest) },
	}
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answers[n.Add(1)-1](w)
	}))
	defer srv.Close()
	send, err := relay.HTTPSender(srv.Client(), "", srv.URL, nil)
	require.NoError(t, err)
	m := &queue.Message{Key: "k", Body: []byte("b")}

	err = send(context.Background(), m)
	require.True(t, retry.IsPermanent(err))
	require.EqualError(t, err, "oncekv: http status 422 Unprocessable Entity: (replayed) Invalid note: title must not be empty")

	err = send(context.Background(), m)
	require.False(t, retry.IsPermanent(err))
	d, ok := retry.RetryAfter(err)
	require.True(t, ok)
	require.Equal(t, 7*time.Second, d)
	require.True(t, strings.HasPrefix(err.Error(), "oncekv: http status 503 Service Unavailable: down for maintenance xxx"), err.Error())
	require.LessOrEqual(t, len(err.Error()), 400)
	require.NotContains(t, err.Error(), "\n")

	err = send(context.Background(), m)
	require.EqualError(t, err, "oncekv: http status 400 Bad Request")
}

// TestRelayKeepsOrderThroughARedrivenDeadHead: the far side refuses
// edit-1 of a note (422, its answer kept as the dead letter's reason);
// edit-2 and edit-3 are held meanwhile; once the operator redrives edit-1,
// the far side sees edit-1, edit-2, edit-3.
func TestRelayKeepsOrderThroughARedrivenDeadHead(t *testing.T) {
	e := newEnv(t, nil)
	for _, k := range []string{"edit-1", "edit-2", "edit-3"} {
		_, err := e.q.Enqueue(context.Background(), queue.Message{Key: k, Body: []byte(k), OrderingKey: "note-7"})
		require.NoError(t, err)
	}
	var mu sync.Mutex
	var accepted []string
	refused := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		key := r.Header.Get("Idempotency-Key")
		if key == "edit-1" && !refused {
			refused = true
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, `{"title":"Note locked","detail":"note-7 is being edited elsewhere"}`)
			return
		}
		accepted = append(accepted, key)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	send, err := relay.HTTPSender(srv.Client(), "", srv.URL, nil)
	require.NoError(t, err)
	r := e.relay(t, send, &relay.Options{Workers: 3})
	run := start(r.Run)
	defer run.stop(t)
	require.Eventually(t, func() bool { return r.Stats().DeadLettered == 1 }, 20*time.Second, time.Millisecond)
	e.quiet(t)
	mu.Lock()
	require.Empty(t, accepted, "edit-2 and edit-3 wait for edit-1")
	mu.Unlock()
	dead, err := e.q.DeadLetters(0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, "edit-1", dead[0].Key)
	require.Contains(t, dead[0].LastError, "422 Unprocessable Entity: Note locked: note-7 is being edited elsewhere")

	_, err = e.q.Redrive(context.Background(), dead[0].ID)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return r.Stats().Sent == 3 }, 20*time.Second, time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"edit-1", "edit-2", "edit-3"}, accepted)
}
