package otel_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncekv/oncekv/idemhttp"
	oncekvotel "github.com/oncekv/oncekv/otel"
)

// idemServer is Middleware in front of idemhttp in front of handler.
func idemServer(t *testing.T, r *rig, handler http.HandlerFunc) http.Handler {
	t.Helper()
	st := openStore(t)
	idem, err := idemhttp.New(st.db, &idemhttp.Options{Scope: func(*http.Request) (string, error) { return "user", nil }})
	require.NoError(t, err)
	return r.tel.Middleware(idem.Wrap(handler))
}

// do serves one request with header h and body, and returns the answer.
func do(h http.Handler, ctx context.Context, header http.Header, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequestWithContext(ctx, "POST", "/pay", strings.NewReader(body))
	for k, vs := range header {
		req.Header[k] = vs
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func TestMiddlewareOutcomesFollowIdemhttpsAnswers(t *testing.T) {
	r := newRig(t, nil)
	release := make(chan struct{})
	running := make(chan struct{})
	h := idemServer(t, r, func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("X-Block") != "" {
			close(running)
			<-release
		}
		if req.Header.Get("X-Fail") != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	ctx := context.Background()
	key := keyLike(3)
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}

	require.Equal(t, 201, do(h, ctx, hdr("Idempotency-Key", key), "a").Code)
	require.Equal(t, 201, do(h, ctx, hdr("Idempotency-Key", `"`+key+`"`), "a").Code, "the quoted form names the same key")
	require.Equal(t, 422, do(h, ctx, hdr("Idempotency-Key", key), "b").Code)
	require.Equal(t, 503, do(h, ctx, hdr("Idempotency-Key", keyLike(4), "X-Fail", "1"), "a").Code)
	blocked := make(chan int)
	go func() { blocked <- do(h, ctx, hdr("Idempotency-Key", keyLike(5), "X-Block", "1"), "a").Code }()
	<-running
	require.Equal(t, 409, do(h, ctx, hdr("Idempotency-Key", keyLike(5)), "a").Code)
	close(release)
	require.Equal(t, 201, <-blocked)
	require.Equal(t, 201, do(h, ctx, nil, "no key").Code)

	spans := r.ended("oncekv.http.request")
	require.Len(t, spans, 7)
	byKey := map[string][]string{}
	for _, sp := range spans {
		byKey[str(sp, oncekvotel.AttrKeyHash)] = append(byKey[str(sp, oncekvotel.AttrKeyHash)], str(sp, oncekvotel.AttrOutcome))
		require.Equal(t, trace.SpanKindServer, sp.SpanKind(), "no span was in the context: Middleware's is the server span")
	}
	require.Equal(t, []string{"applied", "duplicate", "key_reuse"}, byKey[r.tel.KeyHash(key)])
	require.Equal(t, []string{"error"}, byKey[r.tel.KeyHash(keyLike(4))])
	require.Equal(t, []string{"in_progress", "applied"}, byKey[r.tel.KeyHash(keyLike(5))], "the 409 ends first")
	require.Equal(t, []string{""}, byKey[""], "a request without a key has no outcome")
	for _, sp := range spans {
		if h := str(sp, oncekvotel.AttrKeyHash); h != "" {
			require.Equal(t, h, sp.SpanContext().TraceID().String(), "a request without trace context opens its key's trace")
		}
		switch str(sp, oncekvotel.AttrOutcome) {
		case "key_reuse", "error":
			require.Equal(t, codes.Error, sp.Status().Code)
		default:
			require.Equal(t, codes.Unset, sp.Status().Code)
		}
	}
	requireNoKey(t, r, key)
}

// TestMiddlewareKeepsACallersTrace: a client with a trace of its own keeps
// it; the span links to the key's trace, and the key comes from the
// header even when the baggage names another operation.
func TestMiddlewareKeepsACallersTrace(t *testing.T) {
	r := newRig(t, nil)
	var inner context.Context
	h := idemServer(t, r, func(w http.ResponseWriter, req *http.Request) {
		inner = req.Context()
		w.WriteHeader(http.StatusCreated)
	})
	cctx, caller := r.tracer().Start(context.Background(), "client")
	other, err := baggage.NewMemberRaw(oncekvotel.BaggageKeyHash, r.tel.KeyHash("upstream-op"))
	require.NoError(t, err)
	b, err := baggage.New(other)
	require.NoError(t, err)
	cctx = baggage.ContextWithBaggage(cctx, b)
	header := http.Header{}
	r.tel.Propagator().Inject(cctx, propagation.HeaderCarrier(header))
	header.Set("Idempotency-Key", "k")
	require.Equal(t, 201, do(h, context.Background(), header, "x").Code)
	caller.End()

	sp := r.one(t, "oncekv.http.request")
	require.Equal(t, caller.SpanContext().TraceID(), sp.SpanContext().TraceID())
	require.Equal(t, caller.SpanContext().SpanID(), sp.Parent().SpanID())
	require.Len(t, sp.Links(), 1)
	require.Equal(t, r.tel.TraceID("k"), sp.Links()[0].SpanContext.TraceID())
	require.Equal(t, r.tel.KeyHash("k"), str(sp, oncekvotel.AttrKeyHash), "the header's key, not the baggage's")
	require.Equal(t, r.tel.KeyHash("k"), baggage.FromContext(inner).Member(oncekvotel.BaggageKeyHash).Value(),
		"the handler's context names this request's operation")
	require.Equal(t, sp.SpanContext().SpanID(), trace.SpanContextFromContext(inner).SpanID())
}

// TestMiddlewareBehindAnotherServerSpan: with a span in the context
// already (otelhttp in front), Middleware reads nothing from the wire and
// its span is an internal child; a key only in the baggage is used.
func TestMiddlewareBehindAnotherServerSpan(t *testing.T) {
	r := newRig(t, nil)
	h := r.tel.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	member, err := baggage.NewMemberRaw(oncekvotel.BaggageKeyHash, r.tel.KeyHash("k"))
	require.NoError(t, err)
	b, err := baggage.New(member)
	require.NoError(t, err)
	ctx, outer := r.tracer().Start(baggage.ContextWithBaggage(context.Background(), b), "HTTP POST",
		trace.WithSpanKind(trace.SpanKindServer))
	require.Equal(t, 204, do(h, ctx, http.Header{"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}, "").Code)
	outer.End()
	sp := r.one(t, "oncekv.http.request")
	require.Equal(t, trace.SpanKindInternal, sp.SpanKind())
	require.Equal(t, outer.SpanContext().SpanID(), sp.Parent().SpanID(), "the wire's traceparent is otelhttp's business")
	require.Equal(t, r.tel.KeyHash("k"), str(sp, oncekvotel.AttrKeyHash))
	require.Equal(t, "applied", str(sp, oncekvotel.AttrOutcome))
	require.Equal(t, int64(204), attrs(sp)["http.response.status_code"].AsInt64())
}

func TestMiddlewareKeepsTheWritersFlush(t *testing.T) {
	r := newRig(t, nil)
	h := r.tel.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("part"))
		require.NoError(t, http.NewResponseController(w).Flush())
		w.(http.Flusher).Flush()
	}))
	w := do(h, context.Background(), nil, "")
	require.True(t, w.Flushed)
	require.Equal(t, "part", w.Body.String())
	require.Panics(t, func() { r.tel.Middleware(nil) })
}
