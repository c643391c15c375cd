package idemgrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
)

// Options configures a Server. Nil fields take their defaults; New works
// on a copy.
type Options struct {
	// Scope returns the authenticated caller of a call (its user, account
	// or API key id) from the call's context, where an auth interceptor
	// that runs before this one put it. Required. Records are keyed by
	// (scope, key), so one caller's key never answers another caller. An
	// error or an empty scope answers UNAUTHENTICATED without running the
	// handler.
	Scope func(ctx context.Context) (string, error)

	// Handler is the oncekv handler name the records are stored under.
	// Default "idemgrpc".
	Handler string

	// Methods are the full method names covered ("/pkg.Service/Method");
	// others pass through untouched. Default: every unary method.
	Methods []string

	// RequireKey answers INVALID_ARGUMENT to a covered call without a key.
	// Default false: such a call passes through.
	RequireKey bool

	// FingerprintMetadata are request metadata keys that take part in the
	// fingerprint along with the full method name and the request message.
	// Default none.
	FingerprintMetadata []string

	// MaxRecordBytes caps the stored answer (the response message and its
	// status). A larger answer is sent, not stored, and the key released.
	// Default 1 MiB; at most 1 GiB.
	MaxRecordBytes int

	// Lease is how long a running call holds its key before another may
	// take it over; the heartbeat extends it while the handler runs.
	// Default 30s.
	Lease time.Duration

	// Heartbeat is how often a running handler's lease is extended.
	// Default Lease/3; it must be shorter than Lease.
	Heartbeat time.Duration

	// Store reports whether an answer with this status code is stored. An
	// answer not stored releases the key, so a retry runs the handler
	// again, and drops the staged writes. Default StoreClientCodes.
	Store func(code codes.Code) bool

	// Now is the clock the pushback is computed with. Default: the
	// store's (DB.Now).
	Now func() time.Time

	// Logger receives store failures and keys whose release failed.
	// Default: nothing is logged.
	Logger *slog.Logger
}

// ErrInvalidOptions is returned by New for a nil store or bad Options;
// the error names each bad field.
var ErrInvalidOptions = errors.New("idemgrpc: invalid options")

// StoreClientCodes is the default Options.Store: OK and the codes that
// say the request itself was wrong, which a retry of the same request
// would get again, are stored; the server's failures are released.
func StoreClientCodes(code codes.Code) bool {
	switch code {
	case codes.OK, codes.InvalidArgument, codes.NotFound, codes.AlreadyExists,
		codes.PermissionDenied, codes.FailedPrecondition, codes.OutOfRange, codes.Unimplemented,
		codes.Unauthenticated:
		return true
	}
	return false
}

func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...))
	}
	if c.Scope == nil {
		bad("Scope is required (keys are kept per caller)")
	}
	if c.Handler == "" {
		c.Handler = "idemgrpc"
	}
	switch {
	case c.MaxRecordBytes == 0:
		c.MaxRecordBytes = 1 << 20
	case c.MaxRecordBytes < 0 || c.MaxRecordBytes > 1<<30:
		bad("MaxRecordBytes is %d, want 1 to 1 GiB (0 for the default)", c.MaxRecordBytes)
	}
	switch {
	case c.Lease == 0:
		c.Lease = 30 * time.Second
	case c.Lease < 0:
		bad("Lease is %v, want > 0", c.Lease)
	}
	switch {
	case c.Heartbeat == 0:
		c.Heartbeat = c.Lease / 3
	case c.Heartbeat < 0 || c.Heartbeat >= c.Lease:
		bad("Heartbeat is %v, want > 0 and shorter than Lease (%v)", c.Heartbeat, c.Lease)
	}
	if c.Store == nil {
		c.Store = StoreClientCodes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, errors.Join(errs...)
}
