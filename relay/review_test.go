package relay_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
	"github.com/oncekv/oncekv/retry"
)

// A redirect that turns the POST into a GET (301, 302, 303: net/http's
// client drops the body) must not count as delivered: the far side never
// got the body. Here the target of the redirect answers 200 to anything,
// as a careless handler (or Go's ServeMux adding a trailing slash) does.
func TestHTTPSenderRefusesARedirectThatDropsTheBody(t *testing.T) {
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther} {
		var posts atomic.Int64
		mux := http.NewServeMux()
		mux.HandleFunc("/in", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/in/", code)
		})
		mux.HandleFunc("/in/", func(w http.ResponseWriter, r *http.Request) {
			if b, _ := io.ReadAll(r.Body); r.Method == http.MethodPost && string(b) == "payload" {
				posts.Add(1)
			}
		})
		srv := httptest.NewServer(mux)
		send, err := relay.HTTPSender(srv.Client(), "", srv.URL+"/in", nil)
		require.NoError(t, err)
		err = send(context.Background(), &queue.Message{Key: "k", Body: []byte("payload")})
		srv.Close()
		if err == nil {
			require.EqualValues(t, 1, posts.Load(), "status %d: send said delivered, the server got no POST", code)
			continue
		}
		require.True(t, retry.IsPermanent(err), "status %d: %v", code, err)
		require.Contains(t, err.Error(), "redirect", "status %d", code)
	}
}

// A redirect that keeps the method and body (307, 308) is followed.
func TestHTTPSenderFollowsARedirectThatKeepsTheBody(t *testing.T) {
	for _, code := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		var posts atomic.Int64
		mux := http.NewServeMux()
		mux.HandleFunc("/in", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/in/", code)
		})
		mux.HandleFunc("/in/", func(w http.ResponseWriter, r *http.Request) {
			if b, _ := io.ReadAll(r.Body); r.Method == http.MethodPost && string(b) == "payload" &&
				r.Header.Get("Idempotency-Key") == "k" {
				posts.Add(1)
			}
		})
		srv := httptest.NewServer(mux)
		send, err := relay.HTTPSender(srv.Client(), "", srv.URL+"/in", nil)
		require.NoError(t, err)
		require.NoError(t, send(context.Background(), &queue.Message{Key: "k", Body: []byte("payload")}), "status %d", code)
		srv.Close()
		require.EqualValues(t, 1, posts.Load(), "status %d", code)
	}
}

// A header that net/http refuses to send (a newline in a value, a space
// in a name) is bad input to HTTPSender, not a transient network error
// that every message retries until it is dead-lettered.
func TestHTTPSenderRefusesHeadersNetHTTPCannotSend(t *testing.T) {
	for _, h := range []http.Header{
		{"Authorization": {"Device a\nb"}},
		{"Bad Name": {"v"}},
		{"X-Nul": {"a\x00b"}},
	} {
		_, err := relay.HTTPSender(nil, "", "http://x", &relay.HTTPOptions{Header: h})
		require.ErrorIs(t, err, relay.ErrInvalidSender, "%q", h)
	}
	send, err := relay.HTTPSender(nil, "", "http://x", &relay.HTTPOptions{Header: http.Header{"X-Empty": {""}, "X-Tab": {"a\tb"}}})
	require.NoError(t, err, "empty values and tabs are valid")
	require.NotNil(t, send)
}

// A send cut short by Run's stop (Grace over) is not the message's fault:
// even on its last attempt it is released for the next Run, not
// dead-lettered.
func TestRelayStopDoesNotDeadLetterAnInterruptedLastAttempt(t *testing.T) {
	e := newEnv(t, &queue.Options{Retry: &retry.Policy{MaxAttempts: 1}})
	e.enqueue(t, "k")
	entered := make(chan struct{})
	send := func(ctx context.Context, m *queue.Message) error {
		close(entered)
		<-ctx.Done()
		return ctx.Err()
	}
	r := e.relay(t, send, &relay.Options{Grace: -1, Workers: 1})
	run := start(r.Run)
	<-entered
	require.NoError(t, run.stop(t))
	st := e.stats(t)
	require.Zero(t, st.Dead, "%+v", st)
	require.EqualValues(t, 1, st.Ready, "%+v", st)
	require.Zero(t, r.Stats().DeadLettered)

	rec := &recorder{clock: e.clock.Now}
	run = start(e.relay(t, rec.send, nil).Run)
	require.Eventually(t, func() bool { return rec.count("k") == 1 }, 20*time.Second, time.Millisecond)
	require.NoError(t, run.stop(t))
	require.Zero(t, e.stats(t).Depth)
}

func TestCheckKey(t *testing.T) {
	for _, k := range []string{"", "a\nb", " k", "k\t", "k\x7f"} {
		require.ErrorIs(t, relay.CheckKey(k), relay.ErrInvalidKey, "%q", k)
	}
	for _, k := range []string{"k", "order-1/é", "a b", "a\tb"} {
		require.NoError(t, relay.CheckKey(k), "%q", k)
	}
}

// A relay given no Now runs on the store's clock: with a clock injected
// into the store, the age of the message a worker holds is counted on it,
// not on the machine's (which would put it months off here).
func TestRelayDefaultsToTheStoresClock(t *testing.T) {
	e := newEnv(t, nil)
	e.enqueue(t, "held")
	e.clock.Advance(time.Hour)
	sending := make(chan struct{})
	release := make(chan struct{})
	r, err := relay.New(e.q, func(ctx context.Context, _ *queue.Message) error {
		close(sending)
		<-release
		return nil
	}, nil)
	require.NoError(t, err)
	run := start(r.Run)
	<-sending
	require.Equal(t, time.Hour, r.Stats().OldestPendingAge)
	close(release)
	e.quiet(t)
	require.NoError(t, run.stop(t))
}
