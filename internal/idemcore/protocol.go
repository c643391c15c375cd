package idemcore

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/oncekv/oncekv"
)

// Protocol runs the idempotency protocol over one store. Its fields are
// set once, before the first Begin; it is then safe for concurrent use.
type Protocol struct {
	Store Store
	// Lease is how long a running request holds its key; Heartbeat how
	// often the lease is extended while it runs (shorter than Lease).
	Lease, Heartbeat time.Duration
	// Now is the clock RetryAfter is computed with: the store's, unless a
	// test injects one.
	Now func() time.Time
	// Logger receives the failures the protocol cannot report to the
	// caller (a release that failed). Required.
	Logger *slog.Logger
}

// Begin claims req's key. It returns the stored result when the key was
// answered before (replay its Response; the handler must not run), or a
// Run holding the key, or the claim's error (see Refuse).
func (p *Protocol) Begin(ctx context.Context, req oncekv.Request) (replay *oncekv.Result, run *Run, err error) {
	c, err := p.Store.Claim(ctx, req, p.Lease)
	if err != nil {
		return nil, nil, err
	}
	if c.Done() {
		res := c.Result()
		return &res, nil, nil
	}
	return nil, p.start(ctx, c), nil
}

// Kind is why a key could not be claimed.
type Kind int

// Kinds of Refusal.
const (
	// StoreFailed: the store failed; nothing was kept (500, INTERNAL).
	StoreFailed Kind = iota
	// InProgress: another request holds the key for RetryAfter more
	// (409 with Retry-After, ABORTED).
	InProgress
	// KeyReuse: the key was first used with another fingerprint (422,
	// FAILED_PRECONDITION).
	KeyReuse
	// Unavailable: the store is closed or the caller went away before the
	// key was claimed (503, UNAVAILABLE).
	Unavailable
)

// Refusal is a Begin error, classified for the transport's answer.
type Refusal struct {
	Kind Kind
	// RetryAfter, for InProgress: until the holder's lease ends when the
	// store said when, and otherwise the whole Lease, which the remaining
	// lease never exceeds since every heartbeat extends it to Lease from
	// then. Send RetryAfterSeconds of it.
	RetryAfter time.Duration
}

// Refuse classifies err, an error of Begin for a request whose context is
// ctx.
func (p *Protocol) Refuse(ctx context.Context, err error) Refusal {
	switch {
	case errors.Is(err, oncekv.ErrInProgress):
		return Refusal{Kind: InProgress, RetryAfter: RetryAfter(err, p.Now(), p.Lease)}
	case errors.Is(err, oncekv.ErrKeyReuse):
		return Refusal{Kind: KeyReuse}
	case ctx.Err() != nil, errors.Is(err, oncekv.ErrClosed):
		return Refusal{Kind: Unavailable}
	}
	return Refusal{Kind: StoreFailed}
}

// RetryAfter is how long a client should wait before retrying a key held
// by a running request: until the live claim's lease ends, when err
// carries it (a LeaseUntil method anywhere in its chain), and otherwise
// fallback.
func RetryAfter(err error, now time.Time, fallback time.Duration) time.Duration {
	var held interface{ LeaseUntil() time.Time }
	if errors.As(err, &held) {
		if until := held.LeaseUntil(); !until.IsZero() {
			return until.Sub(now)
		}
	}
	return fallback
}

// RetryAfterSeconds rounds d up to whole seconds, at least 1: Retry-After
// has no finer unit, and 0 would invite a client to retry at once.
func RetryAfterSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++ // rounded up without adding to d, which may be near its maximum
	}
	return max(s, 1)
}
