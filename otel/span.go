package otel

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The attributes of oncekv's spans. Queries and dashboards may rely on
// these names.
const (
	AttrHandler    = attribute.Key("oncekv.handler")     // Request.Handler
	AttrKey        = attribute.Key("oncekv.key")         // the key, only with Options.RecordKeys
	AttrKeyHash    = attribute.Key("oncekv.key_hash")    // see Telemetry.KeyHash
	AttrOutcome    = attribute.Key("oncekv.outcome")     // see Outcome
	AttrAction     = attribute.Key("oncekv.action")      // oncekv.Classify's action: ack, retry_now, retry_later, give_up, reopen
	AttrDuplicate  = attribute.Key("oncekv.duplicate")   // answered from a stored mark; the effect did not run
	AttrMarkAge    = attribute.Key("oncekv.mark_age")    // seconds since the key was first seen, on duplicates
	AttrEffectRuns = attribute.Key("oncekv.effect_runs") // runs of the effect; over 1 when a commit ran it again
	AttrToken      = attribute.Key("oncekv.token")       // a claim's or a delivery's fencing token
	AttrLeaseUntil = attribute.Key("oncekv.lease_until") // the end of a lease, RFC 3339 by the store's clock
	AttrAttempt    = attribute.Key("oncekv.attempt")     // a delivery's number, 1 on the first
	AttrQueue      = attribute.Key("oncekv.queue")       // a queue's name
	AttrMessageID  = attribute.Key("oncekv.message.id")  // a queue's number for a message
	AttrDeadLetter = attribute.Key("oncekv.dead_letter") // a nack or send that dead-lettered its message
	AttrBatchSize  = attribute.Key("oncekv.batch.size")  // requests of an ApplyBatch
	AttrBatchIndex = attribute.Key("oncekv.batch.index") // a request's index in its batch, on its event
)

// Attributes of events and links, and the names of events.
const (
	attrLease      = attribute.Key("oncekv.lease")       // the lease a claim asked for, in seconds
	attrCause      = attribute.Key("oncekv.cause")       // a failure's message, on Fail's and Nack's events
	attrPermanent  = attribute.Key("oncekv.permanent")   // whether that failure was permanent
	attrRetryAfter = attribute.Key("oncekv.retry_after") // a transient send error's Retry-After, in seconds
	linkOperation  = attribute.Key("oncekv.link")        // "operation" on the link to a key's trace
	exceptionMsg   = attribute.Key("exception.message")
	exceptionType  = attribute.Key("exception.type")

	linkOperationTo = "operation"
	eventRequest    = "oncekv.request"
	eventException  = "exception"
)

// Start starts a span named name about the logical operation whose
// idempotency key is key, so that every retry of the operation, in any
// process, can be found together:
//
//   - when ctx's span is in key's operation trace already (a request the
//     relay sent through Transport), the span is its child;
//   - when ctx has no span (a consumer's loop, a request that came without
//     trace context), the span opens key's operation trace: its parent is
//     a placeholder span context whose trace ID is TraceID(key), and no
//     span with the placeholder's ID is ever recorded;
//   - when ctx's span is of another trace (a caller's own), the span is its
//     child, so that trace stays whole, with a link to key's operation
//     trace.
//
// The span carries oncekv.key_hash (and oncekv.key with
// Options.RecordKeys), and the returned context carries them in its
// baggage, replacing those of an earlier operation, so a request made with
// it names this operation to the next service. A key of "" means the one
// ctx's baggage names, if any; with none, Start is the tracer's Start.
//
// It is the function an interceptor of another transport (gRPC) calls
// once it has extracted the trace context and baggage with Propagator.
func (t *Telemetry) Start(ctx context.Context, name, key string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	op := t.operationOf(key)
	if key == "" {
		op = t.operationOfBaggage(ctx)
	}
	ctx, span := t.start(ctx, name, op, opts...)
	if op.valid() {
		ctx = withBaggage(ctx, op)
	}
	return ctx, span
}

// start starts a span about op by the rule Start documents, without
// touching the baggage.
func (t *Telemetry) start(ctx context.Context, name string, op operation, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if op.valid() {
		parent := trace.SpanContextFromContext(ctx)
		switch {
		case parent.IsValid() && parent.TraceID() == op.trace:
		case parent.IsValid():
			opts = append(opts, trace.WithLinks(trace.Link{
				SpanContext: op.placeholder(t.sampled(op.trace)),
				Attributes:  []attribute.KeyValue{linkOperation.String(linkOperationTo), AttrKeyHash.String(op.hashString())},
			}))
		default:
			ctx = trace.ContextWithRemoteSpanContext(ctx, op.placeholder(t.sampled(op.trace)))
		}
		opts = append(opts, trace.WithAttributes(op.attributes()...))
	}
	return t.tracer.Start(ctx, name, opts...)
}

// attributes are the key hash, and the key where it may be recorded.
func (op operation) attributes() []attribute.KeyValue {
	attrs := []attribute.KeyValue{AttrKeyHash.String(op.hashString())}
	if op.key != "" {
		attrs = append(attrs, AttrKey.String(op.key))
	}
	return attrs
}

// fail marks span as failed with err, whose message has key replaced by
// its hash unless keys may be recorded: an oncekv error names its key.
// err.Error() runs on the caller's goroutine, as the caller's own call.
func (t *Telemetry) fail(span trace.Span, key string, err error) {
	msg := t.redact(err.Error(), key)
	span.AddEvent(eventException, trace.WithAttributes(exceptionType.String(typeName(err)), exceptionMsg.String(msg)))
	span.SetStatus(codes.Error, msg)
}

// redact replaces key in msg, as it is and quoted, by its hash.
func (t *Telemetry) redact(msg, key string) string {
	if key == "" || (t.opts.RecordKeys && len(key) <= MaxKeyAttribute) {
		return msg
	}
	with := "key#" + t.KeyHash(key)
	msg = strings.ReplaceAll(msg, strconv.Quote(key), with)
	return strings.ReplaceAll(msg, key, with)
}

// typeName is err's dynamic type, as exception.type wants it.
func typeName(err error) string { return fmt.Sprintf("%T", err) }

// tokenAttr records a fencing token: an int64 attribute while it fits,
// its decimal form past that.
func tokenAttr(token uint64) attribute.KeyValue {
	if token > math.MaxInt64 {
		return AttrToken.String(strconv.FormatUint(token, 10))
	}
	return AttrToken.Int64(int64(token))
}

// leaseAttr records the end of a lease; nothing for the zero time.
func leaseAttr(until time.Time) []attribute.KeyValue {
	if until.IsZero() {
		return nil
	}
	return []attribute.KeyValue{AttrLeaseUntil.String(until.UTC().Format(time.RFC3339Nano))}
}
