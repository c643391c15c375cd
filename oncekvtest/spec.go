package oncekvtest

import (
	"errors"
	"fmt"
	"time"

	"pgregory.net/rapid"

	"github.com/oncekv/oncekv"
)

// Defaults of Spec's fields.
const (
	DefaultMaxMessages = 8
	DefaultMaxCopies   = 3
	DefaultReorder     = 3
	DefaultClockSkew   = time.Hour
	DefaultCrashChecks = 10
	// DefaultCrashShrinkRuns is CheckCrash's MaxShrinkRuns.
	DefaultCrashShrinkRuns = 40
)

// CrashChecksEnv names the environment variable that overrides
// Spec.CrashChecks.
const CrashChecksEnv = "ONCEKVTEST_CRASH_CHECKS"

// Limits of Spec's fields: they bound what one case allocates (the
// deliveries of a case are at most MaxMessages*MaxCopies).
const (
	MaxMessagesLimit = 1000
	MaxCopiesLimit   = 10
)

// ErrInvalidSpec is what Check and CheckCrash fail with for a Spec they
// cannot run, naming every field that was wrong.
var ErrInvalidSpec = errors.New("oncekvtest: invalid spec")

// Effect is what Apply runs for one delivery of m: the user's effect,
// over the transaction that commits with the message's mark.
type Effect[M any] func(tx *oncekv.Tx, m M) ([]byte, error)

// Spec is the handler under test and how to exercise it. Messages and
// Request are required, and one of Effect and Open.
type Spec[M any] struct {
	// Messages generates one message. S is a slice of 1 to MaxMessages of
	// them; equal messages in S are a producer's duplicates, which the
	// handler must absorb too.
	Messages *rapid.Generator[M]

	// Request maps a message to the request Apply gets: the handler name,
	// the message's idempotency key and its payload (or fingerprint). It
	// is called at every delivery, as a consumer would, so a key minted
	// there (a UUID per attempt) is caught.
	Request func(m M) oncekv.Request

	// Effect is the effect, for a handler that needs nothing but the
	// transaction. Set Effect or Open, not both.
	Effect Effect[M]

	// Open builds the handler on each fresh store (and, in CheckCrash,
	// at each restart of the child) and returns its effect: for a handler
	// that needs the store itself (a queue.Queue for an outbox) or files
	// of its own (Env.Dir). Functions given to Env.OnClose run after the
	// last delivery, before the Snapshot.
	Open func(env *Env) (Effect[M], error)

	// Snapshot reads the state the two runs must agree on, once every
	// delivery is done and the OnClose functions ran. Default: Buckets of
	// every user bucket. It may change the store: it is the last thing
	// done with it.
	Snapshot func(env *Env) (State, error)

	// Store is the base of the stores' options. Check sets Now (its own
	// clocks), NoSync (true) and ExpireInterval (-1) on a copy. Default:
	// oncekv's defaults.
	Store *oncekv.Options

	// MaxMessages is the largest S. Default 8, at most MaxMessagesLimit.
	MaxMessages int
	// MaxCopies is how many times a message may be delivered: 1 to
	// MaxCopies. Default 3, at most MaxCopiesLimit.
	MaxCopies int
	// Reorder is how many places after its message's place in S a
	// delivery may come: the copies interleave with other messages and
	// the first deliveries of nearby messages swap. Default 3; negative:
	// none (every copy right after the message's first delivery).
	Reorder int
	// InOrder keeps the first deliveries in S's order (only the copies
	// move), for a handler that relies on its messages' order.
	InOrder bool
	// NoFaults turns off the rolled-back attempts and the crashes after a
	// commit that Check injects (CheckCrash never injects them: it kills).
	NoFaults bool
	// ClockSkew is how far ahead of the reference's the duplicated run's
	// clock starts; each clock also moves 1s at every delivery. Default
	// 1h. Negative: both runs have one clock that never moves, for a
	// handler that stores the store's time on purpose (a queue's enqueue
	// time).
	ClockSkew time.Duration
	// CrashChecks caps the cases CheckCrash runs, each a few child
	// processes (rapid's -rapid.checks caps them too). Default 10, or the
	// environment variable CrashChecksEnv when it is set (a positive
	// number): fewer for a quick CI run, more for a soak.
	CrashChecks int
	// MaxShrinkRuns caps the cases rapid runs while it shrinks a
	// failure; past it they pass at once, and the counterexample shown is
	// the smallest found by then. Default: for Check no cap but rapid's
	// own (-rapid.shrinktime, 30s), for CheckCrash DefaultCrashShrinkRuns,
	// since each case starts processes.
	MaxShrinkRuns int
}

// Env is one fresh store and what goes with it, for Spec.Open and
// Spec.Snapshot.
type Env struct {
	// DB is the store. Do not close it.
	DB *oncekv.DB
	// Dir is a directory of the run's own, empty at first, for files the
	// handler writes (an audit log); the store's file is not in it. In
	// CheckCrash it is the same directory at every restart of the child.
	Dir string

	closers []func() error
}

// OnClose registers fn to run after the last delivery, before the
// Snapshot, in the reverse order of registration: a handler's flush. It
// does not run when the process is killed.
func (e *Env) OnClose(fn func() error) { e.closers = append(e.closers, fn) }

// close runs the OnClose functions, last registered first.
func (e *Env) close() error {
	var errs []error
	for i := len(e.closers) - 1; i >= 0; i-- {
		errs = append(errs, e.closers[i]())
	}
	e.closers = nil
	return errors.Join(errs...)
}

// withDefaults returns a copy of s with every zero field set, and every
// problem with it.
func (s Spec[M]) withDefaults() (Spec[M], error) {
	if s.MaxMessages == 0 {
		s.MaxMessages = DefaultMaxMessages
	}
	if s.MaxCopies == 0 {
		s.MaxCopies = DefaultMaxCopies
	}
	switch {
	case s.Reorder == 0:
		s.Reorder = DefaultReorder
	case s.Reorder < 0:
		s.Reorder = 0
	}
	if s.ClockSkew == 0 {
		s.ClockSkew = DefaultClockSkew
	}
	if s.CrashChecks == 0 {
		s.CrashChecks = DefaultCrashChecks
	}
	if s.Snapshot == nil {
		s.Snapshot = func(env *Env) (State, error) { return Buckets(env.DB, nil) }
	}
	var errs []error
	bad := func(field string, value any, why string) {
		errs = append(errs, fmt.Errorf("%w: %s = %v: %s", ErrInvalidSpec, field, value, why))
	}
	if s.Messages == nil {
		bad("Messages", nil, "required: a generator of messages")
	}
	if s.Request == nil {
		bad("Request", nil, "required: the request of a message")
	}
	if (s.Effect == nil) == (s.Open == nil) {
		bad("Effect", "and Open", "exactly one of them is required")
	}
	if s.MaxMessages < 1 || s.MaxMessages > MaxMessagesLimit {
		bad("MaxMessages", s.MaxMessages, fmt.Sprintf("must be 1 to %d (zero means %d)", MaxMessagesLimit, DefaultMaxMessages))
	}
	if s.MaxCopies < 1 || s.MaxCopies > MaxCopiesLimit {
		bad("MaxCopies", s.MaxCopies, fmt.Sprintf("must be 1 to %d (zero means %d)", MaxCopiesLimit, DefaultMaxCopies))
	}
	if s.Reorder > s.MaxMessages {
		bad("Reorder", s.Reorder, fmt.Sprintf("must be at most MaxMessages (%d)", s.MaxMessages))
	}
	if s.MaxShrinkRuns < 0 {
		bad("MaxShrinkRuns", s.MaxShrinkRuns, "must be positive (zero means the default)")
	}
	if s.CrashChecks < 0 {
		bad("CrashChecks", s.CrashChecks, "must be positive (zero means the default)")
	}
	return s, errors.Join(errs...)
}

// open returns the effect for a fresh env.
func (s *Spec[M]) open(env *Env) (Effect[M], error) {
	if s.Effect != nil {
		return s.Effect, nil
	}
	eff, err := s.Open(env)
	if err == nil && eff == nil {
		err = errors.New("a nil effect and no error")
	}
	if err != nil {
		return nil, fmt.Errorf("oncekvtest: Spec.Open: %w", err)
	}
	return eff, nil
}
