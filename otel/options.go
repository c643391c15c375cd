package otel

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of Options' fields.
const (
	DefaultKeyHeader         = "Idempotency-Key"
	DefaultMaxHandlers       = 100
	DefaultMaxDeadLetterScan = 1000
	DefaultRetryRatioWindow  = time.Minute
	// MaxKeyAttribute is the longest key recorded as it is (with
	// Options.RecordKeys): a longer one is recorded by its hash only.
	MaxKeyAttribute = 1024
)

// ErrInvalidOptions: New was given options that cannot work; the message
// lists every bad field.
var ErrInvalidOptions = errors.New("oncekv: otel: invalid options")

// Options configures a Telemetry. Pass nil to New for all defaults; a zero
// field takes its default. New works on a copy.
type Options struct {
	// TracerProvider makes the tracer of every span. Default: the global
	// one (go.opentelemetry.io/otel's GetTracerProvider), read once by New.
	TracerProvider trace.TracerProvider

	// MeterProvider makes the meter of every instrument. Default: the
	// global one, read once by New.
	MeterProvider metric.MeterProvider

	// Propagator writes the trace context and the baggage into the
	// requests Transport sends, and reads them from those Middleware
	// receives. Default: W3C Trace Context and W3C Baggage, whatever the
	// global propagator is (its own default propagates nothing, and
	// retries can only join one trace if both travel).
	Propagator propagation.TextMapPropagator

	// RecordKeys records idempotency keys as they are: in the oncekv.key
	// attribute of spans and the oncekv.key member of the baggage (which
	// every instrumented service downstream then sees, and forwards). Keys
	// are often customer data (an order id, an e-mail's hash), so the
	// default is false: spans and baggage carry only oncekv.key_hash.
	// A key longer than MaxKeyAttribute is never recorded as it is.
	RecordKeys bool

	// KeySecret, when not empty, makes the key hash an HMAC-SHA256 under
	// it instead of a plain SHA-256, so that someone who can read the
	// traces cannot confirm a guessed key (an order number, say) by hashing
	// it. The hash also names the key's trace (see TraceID), so every
	// process whose spans should join one trace per key needs the same
	// secret. Default: none.
	KeySecret []byte

	// SampleRatio is the share of operation traces recorded: the traces
	// whose ID is derived from a key (see Telemetry.Start). Their spans
	// descend from a parent that no sampler saw, so the sampled flag of
	// that parent decides for a ParentBased sampler (the SDK's default);
	// it is set for the keys whose trace ID falls under the ratio, by the
	// SDK's TraceIDRatioBased rule, so every retry of a key, in every
	// process, is recorded or dropped together. Give it the ratio of your
	// root sampler. Default 1 (every key); negative: none; at most 1.
	SampleRatio float64

	// KeyHeader is the header Middleware reads a request's idempotency
	// key from. Default "Idempotency-Key", the header idemhttp reads and
	// relay.HTTPSender writes.
	KeyHeader string

	// MaxHandlers caps the handler attribute values one ObserveDB reports
	// on their own. The first MaxHandlers handlers it sees (in name order
	// within a collection) keep their series for the registration's life;
	// later ones, names that are not valid UTF-8 and a handler literally
	// named "_other" are summed under handler="_other" (the Prometheus
	// module's rule, so both report the same series). Default 100.
	MaxHandlers int

	// MaxDeadLetterScan bounds the dead letters ObserveQueue reads per
	// collection to find the oldest one (queue has no index of dead
	// letters by age). Past it, the age reported is that of the oldest
	// among the first MaxDeadLetterScan by ID: a lower bound. Default
	// 1000.
	MaxDeadLetterScan int

	// RetryRatioWindow is the trailing window over which ObserveRelay's
	// oncekv.relay.retry_ratio is computed. Default 1 minute.
	RetryRatioWindow time.Duration

	// Now is the clock of RetryRatioWindow. Spans are timed by the SDK's
	// own clock. Default time.Now.
	Now func() time.Time
}

// withDefaults returns a copy of o with every default filled in, or
// ErrInvalidOptions naming every bad field.
func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...))
	}
	switch {
	case math.IsNaN(c.SampleRatio) || c.SampleRatio > 1:
		bad("SampleRatio = %v: must be at most 1 (negative: none)", c.SampleRatio)
	case c.SampleRatio == 0:
		c.SampleRatio = 1
	}
	if c.KeyHeader == "" {
		c.KeyHeader = DefaultKeyHeader
	}
	c.KeyHeader = http.CanonicalHeaderKey(c.KeyHeader)
	if c.MaxHandlers < 0 {
		bad("MaxHandlers = %d: must not be negative (zero means %d)", c.MaxHandlers, DefaultMaxHandlers)
	} else if c.MaxHandlers == 0 {
		c.MaxHandlers = DefaultMaxHandlers
	}
	if c.MaxDeadLetterScan < 0 {
		bad("MaxDeadLetterScan = %d: must not be negative (zero means %d)", c.MaxDeadLetterScan, DefaultMaxDeadLetterScan)
	} else if c.MaxDeadLetterScan == 0 {
		c.MaxDeadLetterScan = DefaultMaxDeadLetterScan
	}
	if c.RetryRatioWindow < 0 {
		bad("RetryRatioWindow = %v: must not be negative (zero means %v)", c.RetryRatioWindow, DefaultRetryRatioWindow)
	} else if c.RetryRatioWindow == 0 {
		c.RetryRatioWindow = DefaultRetryRatioWindow
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.KeySecret = append([]byte(nil), c.KeySecret...)
	return c, errors.Join(errs...)
}
