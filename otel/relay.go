package otel

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
	"github.com/oncekv/oncekv/retry"
)

// The outcomes of a relay send.
const (
	OutcomeSent      Outcome = "sent"      // send returned nil: the far side has it
	OutcomeRetry     Outcome = "retry"     // a transient error: the relay nacks, the queue retries
	OutcomePermanent Outcome = "permanent" // a permanent error: the message is dead-lettered
)

// Sender returns send in a span "oncekv.relay.send" (kind Producer) per
// call, about the message's key (see Start: a relay's context carries no
// trace, so every attempt at one message, in any process and after any
// takeover or redrive, opens or joins the same trace), with queueName,
// the message ID, attempt, fencing token, and the outcome: sent, retry
// or permanent. The context send gets carries the span and the key's
// baggage, for Transport (or another sender's propagation) to pass on.
// The error is send's, untouched.
func (t *Telemetry) Sender(queueName string, send relay.Sender) relay.Sender {
	return func(ctx context.Context, m *queue.Message) error {
		ctx, span := t.Start(ctx, "oncekv.relay.send", m.Key, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(AttrQueue.String(queueName), AttrMessageID.Int64(int64(min(m.ID, 1<<63-1))),
				AttrAttempt.Int(m.Attempt), tokenAttr(m.Token)))
		defer span.End()
		err := send(ctx, m)
		switch {
		case err == nil:
			span.SetAttributes(AttrOutcome.String(string(OutcomeSent)))
		case retry.IsPermanent(err):
			span.SetAttributes(AttrOutcome.String(string(OutcomePermanent)), AttrDeadLetter.Bool(true))
			t.fail(span, m.Key, err)
		default:
			attrs := []attribute.KeyValue{AttrOutcome.String(string(OutcomeRetry))}
			if d, ok := retry.RetryAfter(err); ok {
				attrs = append(attrs, attrRetryAfter.Float64(d.Seconds()))
			}
			span.SetAttributes(attrs...)
			t.fail(span, m.Key, err)
		}
		return err
	}
}

// Transport returns an http.RoundTripper that writes the trace context and
// baggage of each request's context into a copy of the request, with
// Options.Propagator, then sends it through base (nil:
// http.DefaultTransport). Give it to the client of relay.HTTPSender (or
// use HTTPSender), so that the far side's Middleware puts its spans in the
// trace of the message's key.
func (t *Telemetry) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{base: base, prop: t.prop}
}

type transport struct {
	base http.RoundTripper
	prop propagation.TextMapPropagator
}

// RoundTrip injects into a clone: a RoundTripper must not change the
// request it is given.
func (tr *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	tr.prop.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	return tr.base.RoundTrip(r)
}

// HTTPSender is relay.HTTPSender on a copy of client (nil:
// http.DefaultClient) whose Transport is wrapped by Transport, in Sender:
// every attempt at a message is a span of its key's trace, and the far
// side receives that trace and the key hash in the request's headers
// (traceparent and baggage, with the W3C propagators). Its arguments and
// errors are relay.HTTPSender's.
func (t *Telemetry) HTTPSender(queueName string, client *http.Client, method, rawURL string, opts *relay.HTTPOptions) (relay.Sender, error) {
	if client == nil {
		client = http.DefaultClient
	}
	c := *client
	c.Transport = t.Transport(client.Transport)
	send, err := relay.HTTPSender(&c, method, rawURL, opts)
	if err != nil {
		return nil, err
	}
	return t.Sender(queueName, send), nil
}
