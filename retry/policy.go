package retry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Defaults of Policy's fields; doc.go argues for each.
const (
	DefaultBase          = time.Second
	DefaultCap           = 5 * time.Minute
	DefaultMaxAttempts   = 10
	DefaultMaxRetryAfter = time.Hour
)

// Policy says how long to wait before each retry and when to stop. Pass
// nil to New for all defaults; a zero field takes its default. New works
// on a copy, so the caller's struct is never changed.
type Policy struct {
	// Base is the ceiling of the first retry's delay: after attempt n
	// fails, the delay is drawn uniformly from [0, min(Cap, Base*2^(n-1))).
	// Default 1s. Must not be negative nor above Cap.
	Base time.Duration

	// Cap bounds the jittered delay however many attempts failed. Default
	// 5 minutes. Must not be negative. A Retry-After may ask for more than
	// Cap, up to MaxRetryAfter.
	Cap time.Duration

	// MaxAttempts is how many attempts a message or call gets, the first
	// included: when attempt MaxAttempts fails, Decide gives up with
	// ReasonExhausted (a queue dead-letters). Default 10; negative means no
	// limit.
	MaxAttempts int

	// MaxRetryAfter caps how long a server's Retry-After is honoured, so a
	// buggy or hostile "Retry-After: 31536000" parks nothing for a year.
	// Default 1 hour. Must not be negative.
	MaxRetryAfter time.Duration

	// Rand is the random source of the jitter. Default: the runtime's
	// generator (math/rand/v2's top-level functions). Tests inject a seeded
	// one (rand.NewPCG(1, 2)); New guards it with a mutex, so a source that
	// is not safe for concurrent use may be given.
	Rand rand.Source

	// Budget, when set, is asked for every retry that Decide allows, and
	// Do records its first attempts in it; see Budget. Default nil: no
	// budget. Share one Budget among every Retrier that calls the same far
	// side.
	Budget *Budget

	// Now is Do's clock (Decide takes the time as an argument). Default
	// time.Now.
	Now func() time.Time

	// Sleep is how Do waits for a delay: it must return early with ctx's
	// error when ctx is done. Default: a timer raced against ctx.Done().
	// Tests inject one that advances a fake clock instead of sleeping.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Retrier is a validated Policy with its defaults filled in. It is safe for
// concurrent use; its methods never sleep, except Do.
type Retrier struct {
	p   Policy
	rnd *rand.Rand // nil: the runtime's generator
}

// New returns a Retrier for p (nil: every default). It fails with an error
// matching ErrInvalidPolicy that lists every bad field.
func New(p *Policy) (*Retrier, error) {
	var c Policy
	if p != nil {
		c = *p
	}
	c.Base = cmp.Or(c.Base, DefaultBase)
	c.Cap = cmp.Or(c.Cap, DefaultCap)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.MaxRetryAfter = cmp.Or(c.MaxRetryAfter, DefaultMaxRetryAfter)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sleep == nil {
		c.Sleep = sleep
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	r := &Retrier{p: c}
	if c.Rand != nil {
		r.rnd = rand.New(&lockedSource{src: c.Rand})
	}
	return r, nil
}

// validate reports every invalid field at once, so a user fixes them in one
// go.
func (p *Policy) validate() error {
	var errs []error
	bad := func(field string, value any, why string) {
		errs = append(errs, fmt.Errorf("%w: %s = %v: %s", ErrInvalidPolicy, field, value, why))
	}
	if p.Base < 0 {
		bad("Base", p.Base, "must be positive (zero means the default)")
	}
	if p.Cap < 0 {
		bad("Cap", p.Cap, "must be positive (zero means the default)")
	}
	if p.Base > 0 && p.Cap > 0 && p.Base > p.Cap {
		bad("Base", p.Base, fmt.Sprintf("must not exceed Cap (%v)", p.Cap))
	}
	if p.MaxRetryAfter < 0 {
		bad("MaxRetryAfter", p.MaxRetryAfter, "must be positive (zero means the default)")
	}
	return errors.Join(errs...)
}

// Policy returns the policy in use, defaults filled in.
func (r *Retrier) Policy() Policy { return r.p }

// Ceiling is the largest delay Backoff can return after attempt fails:
// min(Cap, Base*2^(attempt-1)), computed without overflow for any attempt.
// An attempt below 1 counts as 1.
func (r *Retrier) Ceiling(attempt int) time.Duration {
	shift := max(attempt, 1) - 1
	// Base<<shift overflows once shift reaches 63, or earlier when Base is
	// already above Cap>>shift; either way the answer is Cap.
	if shift >= 63 || r.p.Base > r.p.Cap>>shift {
		return r.p.Cap
	}
	return r.p.Base << shift
}

// Backoff returns the full-jitter delay before the retry that follows
// failed attempt number attempt (1 for the first attempt, the way a queue
// numbers deliveries): uniform in [0, Ceiling(attempt)). Full jitter
// spreads clients that failed together over the whole interval, so their
// retries do not arrive together again.
func (r *Retrier) Backoff(attempt int) time.Duration {
	c := uint64(r.Ceiling(attempt))
	if r.rnd == nil {
		return time.Duration(rand.Uint64N(c))
	}
	return time.Duration(r.rnd.Uint64N(c))
}

// lockedSource lets one seeded source serve goroutines that share a
// Retrier.
type lockedSource struct {
	mu  sync.Mutex
	src rand.Source
}

func (l *lockedSource) Uint64() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.src.Uint64()
}

// sleep waits d or until ctx is done, whichever comes first.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
