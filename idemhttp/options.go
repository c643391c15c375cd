package idemhttp

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// Defaults of Options' fields.
const (
	DefaultHandler        = "idemhttp"
	DefaultMaxBodyBytes   = 1 << 20
	DefaultMaxRecordBytes = 1 << 20
	DefaultLease          = 30 * time.Second

	// MaxKeyLen is the longest Idempotency-Key accepted, in bytes (after
	// unquoting); a longer one gets 400.
	MaxKeyLen = 255
	// maxRecordBytes bounds Options.MaxRecordBytes: a record's body length
	// is stored in 32 bits, and bbolt values must fit in memory anyway.
	maxRecordBytes = 1 << 30
)

// Options configures a Middleware. Nil fields take their defaults; New
// works on a copy.
type Options struct {
	// Scope returns the authenticated caller of r: its user, account or
	// API key id. Required. Records are keyed by (scope, key), so one
	// caller's key never answers another caller. An error or an empty
	// scope answers 401 without running the handler. Scope runs on the
	// request's goroutine: a panic in it is the request's panic.
	Scope func(r *http.Request) (string, error)

	// Handler is the oncekv handler name the records are stored under.
	// Default "idemhttp". Middlewares on one store whose keys must never
	// meet need different names.
	Handler string

	// Methods are the methods covered; others pass through untouched.
	// Default POST and PATCH (the non-idempotent ones).
	Methods []string

	// RequireKey answers 400 to a covered request without an
	// Idempotency-Key. Default false: such a request passes through.
	RequireKey bool

	// MaxBodyBytes is the largest request body accepted; a larger one gets
	// 413 before anything is recorded. The body is read whole before the
	// handler runs (it is part of the fingerprint). Default 1 MiB.
	MaxBodyBytes int64

	// MaxRecordBytes caps the response body that is buffered and stored.
	// Past it, the response streams to the client and its body is not
	// stored (see the package doc). Default 1 MiB; at most 1 GiB.
	MaxRecordBytes int

	// FingerprintHeaders are request headers that take part in the
	// fingerprint along with the method, path, query and body hash, e.g.
	// Content-Type. Default none.
	FingerprintHeaders []string

	// ReplayHeaders are response headers stored and replayed in addition
	// to Content-Type, Content-Encoding, Location and ETag. Set-Cookie is
	// replayed only if listed here.
	ReplayHeaders []string

	// Lease is how long a running request holds its key before another
	// may take it over; the heartbeat extends it while the handler runs.
	// After a crash, a key is free at most Lease after the last
	// heartbeat. Default 30s.
	Lease time.Duration

	// Heartbeat is how often the lease of a running handler is extended.
	// Default Lease/3; it must be shorter than Lease.
	Heartbeat time.Duration

	// Store reports whether a response with this status is stored. A
	// response not stored releases the key so a retry runs the handler
	// again, and drops the staged writes. Default: status < 500.
	Store func(status int) bool

	// Now is the clock that Retry-After is computed with. Default: the
	// store's clock (DB.Now), so one injected Options.Now drives the
	// store's leases and the middleware's Retry-After alike.
	Now func() time.Time

	// Logger receives store failures (error level) and keys whose release
	// failed (warn level). Default: nothing is logged.
	Logger *slog.Logger
}

// ErrInvalidOptions is returned by New for a bad Options; the error names
// every field that was wrong.
var ErrInvalidOptions = errors.New("oncekv: idemhttp: invalid options")

// withDefaults returns a copy of o with every zero field set, and every
// problem with it.
func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Handler == "" {
		c.Handler = DefaultHandler
	}
	if c.Methods == nil {
		c.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxRecordBytes == 0 {
		c.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = c.Lease / 3
	}
	if c.Store == nil {
		c.Store = func(status int) bool { return status < 500 }
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, c.validate()
}

// validate reports every invalid field at once.
func (o *Options) validate() error {
	var errs []error
	bad := func(field string, value any, why string) {
		errs = append(errs, fmt.Errorf("%w: %s = %v: %s", ErrInvalidOptions, field, value, why))
	}
	if o.Scope == nil {
		bad("Scope", "nil", "required: keys must be scoped to the caller")
	}
	if o.MaxBodyBytes < 0 {
		bad("MaxBodyBytes", o.MaxBodyBytes, "must be positive (zero means the default)")
	}
	if o.MaxRecordBytes < 0 || o.MaxRecordBytes > maxRecordBytes {
		bad("MaxRecordBytes", o.MaxRecordBytes, "must be between 1 and 1 GiB (zero means the default)")
	}
	if o.Lease < 0 {
		bad("Lease", o.Lease, "must be positive (zero means the default)")
	}
	if o.Heartbeat < 0 || o.Heartbeat >= o.Lease {
		bad("Heartbeat", o.Heartbeat, "must be positive and shorter than Lease")
	}
	for _, m := range o.Methods {
		if !validToken(m) {
			bad("Methods", fmt.Sprintf("%q", m), "not a method name")
		}
	}
	for _, list := range []struct {
		field string
		names []string
	}{{"FingerprintHeaders", o.FingerprintHeaders}, {"ReplayHeaders", o.ReplayHeaders}} {
		for _, h := range list.names {
			if !validToken(h) {
				bad(list.field, fmt.Sprintf("%q", h), "not a header name")
			}
		}
	}
	return errors.Join(errs...)
}

// validToken reports whether s is an HTTP token (RFC 9110 section 5.6.2),
// the syntax of method and header names.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}
