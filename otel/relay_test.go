package otel_test

import (
	"context"
	"errors"
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
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncekv/oncekv/idemhttp"
	oncekvotel "github.com/oncekv/oncekv/otel"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
	"github.com/oncekv/oncekv/retry"
)

// farSide is a payment service in a process of its own: its telemetry,
// its store, idemhttp behind Middleware, and a network in front that
// loses the answer to the first request after the handler has run: the
// article's lost response, which makes the relay retry.
type farSide struct {
	rig     *rig
	srv     *httptest.Server
	charges atomic.Int64
	mu      sync.Mutex
	headers []http.Header // as each request arrived
}

func newFarSide(t *testing.T, opts *oncekvotel.Options) *farSide {
	t.Helper()
	f := &farSide{rig: newRig(t, opts)}
	st := openStore(t)
	idem, err := idemhttp.New(st.db, &idemhttp.Options{Scope: func(*http.Request) (string, error) { return "relay", nil }})
	require.NoError(t, err)
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := f.charges.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge %d", n)
	})
	inner := f.rig.tel.Middleware(idem.Wrap(charge))
	var requests atomic.Int64
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.headers = append(f.headers, r.Header.Clone())
		f.mu.Unlock()
		if requests.Add(1) == 1 {
			inner.ServeHTTP(httptest.NewRecorder(), r) // served, and the answer lost
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// TestRelayRetriesOfOneKeyLandInOneTrace is the promise: the relay
// sends a message, the answer is lost, the relay retries; both attempts,
// and the far side's handling of each, are spans of one trace, whose ID
// TraceID(key) gives, in the relay's process and in the far side's alike.
func TestRelayRetriesOfOneKeyLandInOneTrace(t *testing.T) {
	far := newFarSide(t, nil)
	near := newRig(t, nil)
	s := openStore(t)
	q := s.queue(t, "outbox", nil)
	key := keyLike(3)
	_, err := q.Enqueue(context.Background(), queue.Message{Key: key, Body: []byte(`{"amount":10}`)})
	require.NoError(t, err)

	send, err := near.tel.HTTPSender("outbox", far.srv.Client(), "POST", far.srv.URL, &relay.HTTPOptions{Now: s.clock.Now})
	require.NoError(t, err)
	r, err := relay.New(q, send, &relay.Options{Now: s.clock.Now, Workers: 1})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	require.Eventually(t, func() bool { return r.Stats().Failed == 1 }, 20*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { st, _ := q.Stats(); return st.InFlight == 0 }, 20*time.Second, time.Millisecond)
	s.clock.Advance(time.Second) // the 502's Retry-After
	require.Eventually(t, func() bool { return r.Stats().Sent == 1 }, 20*time.Second, time.Millisecond)
	require.Equal(t, int64(1), far.charges.Load(), "the retry was answered from idemhttp's record")

	want := near.tel.TraceID(key)
	require.Equal(t, want, far.rig.tel.TraceID(key), "both processes derive the same trace from the key")

	sends := near.ended("oncekv.relay.send")
	require.Len(t, sends, 2)
	outcomes := []string{"retry", "sent"}
	for i, sp := range sends {
		require.Equal(t, want, sp.SpanContext().TraceID(), "attempt %d is in the key's trace", i+1)
		require.Equal(t, int64(i+1), attrs(sp)[oncekvotel.AttrAttempt].AsInt64())
		require.Equal(t, outcomes[i], str(sp, oncekvotel.AttrOutcome))
		require.Equal(t, "outbox", str(sp, oncekvotel.AttrQueue))
	}
	require.NotEqual(t, attrs(sends[0])[oncekvotel.AttrToken].AsInt64(), attrs(sends[1])[oncekvotel.AttrToken].AsInt64(),
		"a new fencing token at each delivery")

	served := far.rig.ended("oncekv.http.request")
	require.Len(t, served, 2)
	farOutcomes := []string{"applied", "duplicate"}
	for i, sp := range served {
		require.Equal(t, want, sp.SpanContext().TraceID(), "the far side's span of attempt %d is in the key's trace", i+1)
		require.Equal(t, sends[i].SpanContext().SpanID(), sp.Parent().SpanID(), "and the child of that attempt's span")
		require.Equal(t, farOutcomes[i], str(sp, oncekvotel.AttrOutcome))
		require.Equal(t, near.tel.KeyHash(key), str(sp, oncekvotel.AttrKeyHash))
		require.Equal(t, int64(201), attrs(sp)["http.response.status_code"].AsInt64())
	}

	far.mu.Lock()
	defer far.mu.Unlock()
	for _, h := range far.headers {
		b, err := baggage.Parse(h.Get("Baggage"))
		require.NoError(t, err)
		require.Equal(t, near.tel.KeyHash(key), b.Member(oncekvotel.BaggageKeyHash).Value())
		require.Empty(t, b.Member(oncekvotel.BaggageKey).Value(), "the key itself only with RecordKeys")
		require.NotEmpty(t, h.Get("Traceparent"))
	}
	requireNoKey(t, near, key)
	requireNoKey(t, far.rig, key)
}

// TestRelaySendOutcomes checks the outcome of a permanent and a transient
// error, and that send gets the span and the key's baggage.
func TestRelaySendOutcomes(t *testing.T) {
	r := newRig(t, &oncekvotel.Options{RecordKeys: true})
	var seen []context.Context
	errs := []error{retry.Permanent(errors.New("bad request")), retry.After(3*time.Second, errors.New("busy")), nil}
	send := r.tel.Sender("outbox", func(ctx context.Context, m *queue.Message) error {
		seen = append(seen, ctx)
		return errs[len(seen)-1]
	})
	for i := range errs {
		require.Equal(t, errs[i], send(context.Background(), &queue.Message{ID: 7, Key: "k", Attempt: i + 1, Token: uint64(10 + i)}))
	}
	sends := r.ended("oncekv.relay.send")
	require.Len(t, sends, 3)
	require.Equal(t, "permanent", str(sends[0], oncekvotel.AttrOutcome))
	require.True(t, attrs(sends[0])[oncekvotel.AttrDeadLetter].AsBool())
	require.Equal(t, "retry", str(sends[1], oncekvotel.AttrOutcome))
	require.Equal(t, 3.0, attrs(sends[1])["oncekv.retry_after"].AsFloat64())
	require.Equal(t, "sent", str(sends[2], oncekvotel.AttrOutcome))
	require.Equal(t, int64(12), attrs(sends[2])[oncekvotel.AttrToken].AsInt64())
	require.Equal(t, trace.SpanKindProducer, sends[2].SpanKind())
	for i, ctx := range seen {
		require.Equal(t, sends[i].SpanContext().SpanID(), trace.SpanContextFromContext(ctx).SpanID())
		require.Equal(t, "k", baggage.FromContext(ctx).Member(oncekvotel.BaggageKey).Value(), "RecordKeys puts the key in the baggage")
	}
}

// TestTransportInjectsIntoACopy checks the headers Transport writes and
// that the caller's request is left as it was.
func TestTransportInjectsIntoACopy(t *testing.T) {
	r := newRig(t, nil)
	var got http.Header
	base := roundTripper(func(req *http.Request) (*http.Response, error) {
		got = req.Header.Clone()
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
	})
	ctx, span := r.tel.Start(context.Background(), "op", "k")
	defer span.End()
	req, err := http.NewRequestWithContext(ctx, "POST", "http://far.example/x", nil)
	require.NoError(t, err)
	resp, err := r.tel.Transport(base).RoundTrip(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Empty(t, req.Header, "the caller's request is not changed")
	extracted := r.tel.Propagator().Extract(context.Background(), propagation.HeaderCarrier(got))
	require.Equal(t, span.SpanContext().SpanID(), trace.SpanContextFromContext(extracted).SpanID())
	require.Equal(t, r.tel.KeyHash("k"), baggage.FromContext(extracted).Member(oncekvotel.BaggageKeyHash).Value())
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestHTTPSenderRefusesWhatRelayRefuses(t *testing.T) {
	r := newRig(t, nil)
	_, err := r.tel.HTTPSender("outbox", nil, "POST", "not a url", nil)
	require.ErrorIs(t, err, relay.ErrInvalidSender)
}
