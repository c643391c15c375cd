package otel

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncekv/oncekv/idemhttp"
)

// The HTTP attributes of Middleware's spans (OpenTelemetry's semantic
// conventions' names).
const (
	attrMethod = attribute.Key("http.request.method")
	attrStatus = attribute.Key("http.response.status_code")
	attrPath   = attribute.Key("url.path")
)

// problemOutcomes maps idemhttp's problem types to the outcome they mean.
var problemOutcomes = map[string]Outcome{
	idemhttp.ProblemKeyMissing:     OutcomeInvalid,
	idemhttp.ProblemKeyInvalid:     OutcomeInvalid,
	idemhttp.ProblemBodyUnreadable: OutcomeInvalid,
	idemhttp.ProblemUnidentified:   OutcomeInvalid,
	idemhttp.ProblemBodyTooLarge:   OutcomeInvalid,
	idemhttp.ProblemInProgress:     OutcomeInProgress,
	idemhttp.ProblemKeyReuse:       OutcomeKeyReuse,
	idemhttp.ProblemStoreFailed:    OutcomeError,
	idemhttp.ProblemUnavailable:    OutcomeUnavailable,
}

// maxProblem bounds the body Middleware reads back of a problem answer to
// find its type; idemhttp's are far shorter.
const maxProblem = 4 << 10

// Middleware returns next (an idemhttp middleware's Wrap, typically)
// behind a span "oncekv.http.request" per request, so that every retry of
// one request joins one trace:
//
//   - when no span is in the request's context yet (no otelhttp in front),
//     the trace context and baggage are read from the request with
//     Options.Propagator, and the span is of kind Server;
//   - the operation is named by the request's Idempotency-Key
//     (Options.KeyHeader; bare or quoted, as idemhttp reads it), else by
//     the baggage's oncekv.key or oncekv.key_hash, and the span joins its
//     trace as Start says: a request the relay sent through Transport is
//     the child of that attempt's span, one without trace context opens
//     the key's trace, one with its own trace keeps it and links to the
//     key's;
//   - the response gives the outcome: duplicate for a replay
//     (Idempotent-Replayed), the problem's meaning for an idemhttp problem
//     (in_progress, key_reuse, invalid, unavailable, error), error for
//     another 5xx, applied otherwise; and the status code.
//
// The handler's context carries the span and the key's baggage, so the
// handler's own outgoing requests (through Transport) name the operation.
// A request without a key gets the span without key attributes.
// Middleware panics on a nil next, when the server is set up.
func (t *Telemetry) Middleware(next http.Handler) http.Handler {
	if next == nil {
		panic("oncekv/otel: Middleware of a nil handler")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		kind := trace.SpanKindInternal
		if !trace.SpanContextFromContext(ctx).IsValid() {
			ctx = t.prop.Extract(ctx, propagation.HeaderCarrier(r.Header))
			kind = trace.SpanKindServer
		}
		key, _ := headerKey(r.Header, t.opts.KeyHeader)
		ctx, span := t.Start(ctx, "oncekv.http.request", key, trace.WithSpanKind(kind),
			trace.WithAttributes(attrMethod.String(r.Method), attrPath.String(r.URL.Path)))
		defer span.End()
		op := t.operationOfBaggage(ctx) // Start put key's there, or kept the peer's
		rw := &responseWriter{w: w, status: http.StatusOK}
		next.ServeHTTP(rw, r.WithContext(ctx))
		span.SetAttributes(attrStatus.Int(rw.status))
		if !op.valid() {
			return
		}
		o := rw.outcome()
		span.SetAttributes(AttrOutcome.String(string(o)), AttrDuplicate.Bool(o == OutcomeDuplicate))
		if o.failed() {
			span.SetStatus(codes.Error, "HTTP "+strconv.Itoa(rw.status)+" "+string(o))
		}
	})
}

// headerKey returns the key of the header named name: bare or a quoted
// structured-field string, as idemhttp takes either; false when there is
// none or it is malformed (idemhttp answers 400 then).
func headerKey(h http.Header, name string) (string, bool) {
	values := h.Values(name)
	if len(values) != 1 {
		return "", false
	}
	v := strings.TrimSpace(values[0])
	if strings.HasPrefix(v, `"`) {
		u, err := strconv.Unquote(v)
		if err != nil {
			return "", false
		}
		v = u
	}
	return v, v != ""
}

// responseWriter keeps what Middleware needs of the answer: its status,
// its replay marker, and the start of a problem body.
type responseWriter struct {
	w       http.ResponseWriter
	status  int
	wrote   bool
	replay  bool
	problem bool
	body    bytes.Buffer // the start of a problem body, at most maxProblem
}

func (rw *responseWriter) Header() http.Header { return rw.w.Header() }

func (rw *responseWriter) WriteHeader(status int) {
	if !rw.wrote && status >= 200 {
		rw.wrote, rw.status = true, status
		h := rw.w.Header()
		rw.replay = h.Get("Idempotent-Replayed") == "true"
		ct, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
		rw.problem = ct == "application/problem+json"
	}
	rw.w.WriteHeader(status)
}

func (rw *responseWriter) Write(p []byte) (int, error) {
	if !rw.wrote {
		rw.WriteHeader(http.StatusOK)
	}
	if rw.problem && rw.body.Len() < maxProblem {
		rw.body.Write(p[:min(len(p), maxProblem-rw.body.Len())])
	}
	return rw.w.Write(p)
}

// Unwrap lets http.ResponseController reach the connection's writer, for
// idemhttp's Flush and a handler's deadlines.
func (rw *responseWriter) Unwrap() http.ResponseWriter { return rw.w }

// Flush forwards to the writer underneath, for handlers that test for
// http.Flusher.
func (rw *responseWriter) Flush() {
	if !rw.wrote {
		rw.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(rw.w).Flush()
}

// outcome reads how idemhttp answered.
func (rw *responseWriter) outcome() Outcome {
	if rw.replay {
		return OutcomeDuplicate
	}
	if rw.problem {
		var p struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(rw.body.Bytes(), &p) == nil {
			if o, ok := problemOutcomes[p.Type]; ok {
				return o
			}
		}
	}
	if rw.status >= 500 {
		return OutcomeError
	}
	return OutcomeApplied
}
