package dupproxy

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Defaults of Options' fields.
const (
	DefaultFraction    = 0.05
	DefaultDelay       = time.Second
	DefaultKeyHeader   = "Idempotency-Key"
	DefaultMaxBody     = 1 << 20
	DefaultMaxRoutes   = 200
	DefaultMaxExamples = 5
	DefaultMaxInFlight = 64
)

// DefaultMethods are the methods whose requests are copied when
// Options.Routes is empty: the ones a retry can hurt. PUT and DELETE are
// among them: idempotent is the handler, not the verb.
var DefaultMethods = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// Mode is when a copy is sent.
type Mode int

const (
	// AfterAnswer sends the copy once the client has the original's
	// whole answer: a retry after a lost response. The default.
	AfterAnswer Mode = iota
	// Concurrent sends the copy as soon as the original request has been
	// written to the upstream (or has failed): a double click, a retry
	// after a timeout while the first attempt still runs.
	Concurrent
	// Delayed sends the copy Options.Delay after the original's answer: a
	// redelivery after a backoff.
	Delayed
)

// modeNames are the modes' flag names.
var modeNames = []string{AfterAnswer: "after", Concurrent: "concurrent", Delayed: "delayed"}

// String returns the mode's flag name.
func (m Mode) String() string { return nameOf(modeNames, int(m), "Mode") }

// ParseMode parses a Mode's String.
func ParseMode(s string) (Mode, error) {
	i, err := parseName(modeNames, s, "mode")
	return Mode(i), err
}

// KeyMode is what a copy does with the original's idempotency key.
type KeyMode int

const (
	// KeepKey sends the copy with the original's key (when it has one):
	// does the route deduplicate? The default.
	KeepKey KeyMode = iota
	// StripKey sends the copy without the key: does the route need one?
	StripKey
	// BothKeys sends two copies, one with the key and one without, when
	// the original has a key (one copy otherwise).
	BothKeys
)

// keyModeNames are the key modes' flag names.
var keyModeNames = []string{KeepKey: "keep", StripKey: "strip", BothKeys: "both"}

// String returns the key mode's flag name.
func (k KeyMode) String() string { return nameOf(keyModeNames, int(k), "KeyMode") }

// ParseKeyMode parses a KeyMode's String.
func ParseKeyMode(s string) (KeyMode, error) {
	i, err := parseName(keyModeNames, s, "key mode")
	return KeyMode(i), err
}

// nameOf is names[i], or typ(i) for a value without a name.
func nameOf(names []string, i int, typ string) string {
	if i >= 0 && i < len(names) {
		return names[i]
	}
	return fmt.Sprintf("%s(%d)", typ, i)
}

// parseName is the index of s in names, or an ErrInvalidOptions saying
// what the names are.
func parseName(names []string, s, what string) (int, error) {
	if i := slices.Index(names, s); i >= 0 {
		return i, nil
	}
	return 0, fmt.Errorf("%w: %s %q: want one of %s", ErrInvalidOptions, what, s, strings.Join(names, ", "))
}

// ErrInvalidOptions is returned by New for Options it cannot run with,
// naming every field that was wrong.
var ErrInvalidOptions = errors.New("dupproxy: invalid options")

// Options configures a Proxy. Zero fields take their defaults; New works
// on a copy.
type Options struct {
	// Upstream is where every request goes: scheme and host, and a path
	// prefix if any. Required.
	Upstream *url.URL
	// PreserveHost sends the client's Host header upstream instead of the
	// upstream's host. Default false.
	PreserveHost bool

	// Fraction is the share of the eligible requests that get a copy, in
	// (0, 1]. Default 0.05 (5%).
	Fraction float64
	// Routes are http.ServeMux patterns ("POST /orders/{id}",
	// "/payments/") of the requests that may be copied; each is a row of
	// the report. Default none: every request whose method is in Methods
	// may be copied, and its route is its method and path with the
	// segments that look like ids (numbers, UUIDs, long hex or mixed
	// tokens) folded to "{id}".
	Routes []string
	// Methods are the methods copied when Routes is empty. Default
	// DefaultMethods.
	Methods []string

	// Mode is when a copy is sent. Default AfterAnswer.
	Mode Mode
	// Delay is how long after the answer a Delayed copy is sent. Default 1s.
	Delay time.Duration
	// Keys is what a copy does with the idempotency key. Default KeepKey.
	Keys KeyMode
	// KeyHeader names the idempotency key header. Default
	// "Idempotency-Key".
	KeyHeader string
	// ConflictStatus is the status that means "the original is still
	// running" (idemhttp's 409): a Concurrent copy answered so is sent
	// again once the original is answered, and counted as a conflict if
	// the answer is still that status. Default 409; negative: none.
	ConflictStatus int

	// CompareHeaders are the response headers compared besides the status
	// and the body (Location, ETag...). Default none.
	CompareHeaders []string
	// Mask are JSON paths of body fields whose values may differ between
	// two correct answers (a timestamp, a request id): "$.created_at",
	// "$.items[*].id", "$.data[0].etag", "$..request_id" (at any depth),
	// "$.meta.*" (every field of meta). Default none.
	Mask []string

	// MaxBody bounds, in bytes, a request body buffered for its copy (a
	// larger request is forwarded without one) and each answer's body
	// kept for the comparison (a longer one is compared by status and
	// headers only). Default 1 MiB.
	MaxBody int64
	// MaxRoutes bounds the routes the report keeps apart; later ones are
	// counted in "(other routes)". Default 200.
	MaxRoutes int
	// MaxExamples bounds the examples kept per route and kind of copy.
	// Default 5.
	MaxExamples int
	// MaxInFlight bounds the copies running at once; a request that
	// would go past it is forwarded without a copy (and counted). With
	// MaxBody, it bounds the memory the copies hold: about 3*MaxBody each.
	// Default 64.
	MaxInFlight int

	// Transport sends the requests upstream. Default http.DefaultTransport.
	Transport http.RoundTripper
	// Rand returns numbers in [0, 1) that decide which requests get a
	// copy. Default math/rand/v2's Float64.
	Rand func() float64
	// Logger receives the copies' transport errors at debug level and
	// the proxy's own problems. Default: nothing is logged.
	Logger *slog.Logger
}

// withDefaults returns a copy of o with every zero field set, and every
// problem with it.
func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Fraction == 0 {
		c.Fraction = DefaultFraction
	}
	if len(c.Methods) == 0 {
		c.Methods = DefaultMethods
	}
	if c.Delay == 0 {
		c.Delay = DefaultDelay
	}
	if c.KeyHeader == "" {
		c.KeyHeader = DefaultKeyHeader
	}
	if c.ConflictStatus == 0 {
		c.ConflictStatus = http.StatusConflict
	}
	if c.MaxBody == 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.MaxRoutes == 0 {
		c.MaxRoutes = DefaultMaxRoutes
	}
	if c.MaxExamples == 0 {
		c.MaxExamples = DefaultMaxExamples
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.Transport == nil {
		c.Transport = http.DefaultTransport
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	bad := func(field string, value any, why string) {
		errs = append(errs, fmt.Errorf("%w: %s = %v: %s", ErrInvalidOptions, field, value, why))
	}
	if c.Upstream == nil || c.Upstream.Scheme == "" || c.Upstream.Host == "" {
		bad("Upstream", c.Upstream, "required: an absolute URL such as http://127.0.0.1:8080")
	}
	if !(c.Fraction > 0 && c.Fraction <= 1) {
		bad("Fraction", c.Fraction, "must be in (0, 1] (zero means 0.05)")
	}
	if c.Mode < AfterAnswer || c.Mode > Delayed {
		bad("Mode", c.Mode, "must be AfterAnswer, Concurrent or Delayed")
	}
	if c.Keys < KeepKey || c.Keys > BothKeys {
		bad("Keys", c.Keys, "must be KeepKey, StripKey or BothKeys")
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"Delay", int64(c.Delay)}, {"MaxBody", c.MaxBody}, {"MaxRoutes", int64(c.MaxRoutes)},
		{"MaxExamples", int64(c.MaxExamples)}, {"MaxInFlight", int64(c.MaxInFlight)}} {
		if f.v < 0 {
			bad(f.name, f.v, "must be positive (zero means the default)")
		}
	}
	return c, errors.Join(errs...)
}

// errorf is an ErrInvalidOptions naming what was wrong.
func errorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...)
}
