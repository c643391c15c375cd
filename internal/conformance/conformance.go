// Package conformance is the behaviour every oncekv store promises, as one
// test suite that each store's tests run through a small adapter: the
// embedded store (oncekv.DB, conformance_test.go in the root) and the
// PostgreSQL store (postgres.Store, module oncekv/postgres). It covers
// what SPEC sections 3 to 7 promise and does not depend on how a store
// keeps its marks: Apply and ApplyBatch (effect and mark in one
// transaction, duplicates, key reuse, fingerprints, permanent failures,
// cancelled contexts, bad input, concurrency), claims (leases, takeover,
// fencing of the old holder, release), the outcome probe on takeover
// (ClaimWith) and parked keys, tombstones, fencing tokens and fenced writes,
// and windows (retention, expiry, a live lease keeping its window, a clock
// stepped back), each also after a reopen. It calls the stores' public API
// only, through Store.
//
// # Where the stores differ
//
// This is the one place that lists what the two stores do differently;
// the suite checks each store against its own column, and the README
// (docs/postgres.md) repeats the table.
//
//	behaviour                       embedded (oncekv.DB)                       PostgreSQL (postgres.Store)
//	------------------------------  -----------------------------------------  --------------------------------------------------
//	a key whose effect is running   the request waits for the write lock,      ErrInProgress at once, without a lease end
//	elsewhere (same key, at once)   then is answered from the mark             (Classify: RetryLater); never waits for another host
//	a claim held when the store     released at Open: one process owns the     kept until its lease ends: other hosts are alive
//	is opened again                 file, so its holder is gone
//	                                (Options.KeepOrphanedClaims keeps it)
//	duplicates of unseen keys       a Bloom filter per window skips look-ups   no filter: one index probe per live partition
//	                                (SPEC section 7; never a false negative)
//	time                            Options.Now, else the local clock, held    Options.Now, else the database's clock, one for
//	                                back from jumps (MaxClockJump)             every host
//	faults                          file faults: ErrNoSpace, ErrPoisoned,      a lost connection applies nothing (RetryLater);
//	                                ErrLocked, ErrCorrupt of a page            a commit cut off may have happened: the retry is
//	                                                                           answered from the mark
//	the largest response            oncekv.MaxResponseSize (bbolt's value)     postgres.MaxResponseSize (under 1 GiB)
//	fenced writes                   Bucket.PutFenced on a user key             Store.AdvanceFence on a resource, in the user's tx
//	compare-and-set by version      Bucket.PutIfVersion                        none: use a version column in your own UPDATE
//	ExpireStats.Marks               the marks deleted                          PostgreSQL's estimate (pg_class.reltuples)
//	an effect's panic in a batch    the others commit, then it is raised       the same
//	operator calls                  Mark, Marks, Forget, ReleaseClaim, Check,  LoadMarks (from oncekv dump); SQL for the rest
//	                                LoadMarks, Backup, Compact
//	the outcome probe on takeover   DB.ClaimWith, oncekv.ClaimOptions          Store.ClaimWith, the same oncekv.ClaimOptions
//	parked keys                     DB.Parked, DB.ResolveParked, the oncekv    Store.Parked, Store.ResolveParked (with a ctx),
//	                                command; Options.MaxParked per file        oncekv-pg; Options.MaxParked per schema
//	a parked mark at expiry         carried to the newest window               moved to the current partition first
//	loading a parked mark           kept, PARKED                               refused (ErrInvalidMark)
//	tombstones                      about 22 bytes a key, FirstSeen to the     a row of a tombs_<start> partition, ~120 bytes
//	                                minute, a Bloom filter per window          a key, FirstSeen exact; no filter
//	late duplicates, duplicate age  Stats, oncekv advise                       not kept
//
// Kind names the column a store follows.
package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/fakeclock"
)

// Kind is the column of the differences table a store follows.
type Kind uint8

const (
	// Embedded is oncekv.DB: one process owns a bbolt file.
	Embedded Kind = iota
	// Shared is postgres.Store: many hosts share one schema.
	Shared
)

// Config is what the suite asks of a store it opens.
type Config struct {
	Retention  time.Duration
	WindowSpan time.Duration
	Now        func() time.Time // the suite's clock; the store must use it
	// TombstoneRetention is the store's option of that name (0: none).
	TombstoneRetention time.Duration
}

// Harness opens stores of one kind for the suite.
type Harness struct {
	Kind Kind
	// Open opens a new, empty store with cfg, and background expiry off.
	// The harness removes it when the test ends; the suite closes it.
	Open func(t *testing.T, cfg Config) Store
	// Reopen closes s (the suite may have closed it already) and opens
	// the same store again with cfg.
	Reopen func(t *testing.T, s Store, cfg Config) (Store, error)
	// LimitResponse lowers the largest response s's marks hold to n
	// bytes, so that the suite reaches the limit without allocating it.
	LimitResponse func(s Store, n int)
}

// Store is a store seen through its public API. Its user data is a table
// (or bucket) of counters that effects increment in the store's
// transaction, and one of values written under fences.
type Store interface {
	Apply(ctx context.Context, req oncekv.Request, e *Effect) (oncekv.Result, error)
	ApplyBatch(ctx context.Context, reqs []oncekv.Request, e func(i int) *Effect) ([]oncekv.BatchResult, error)
	Claim(ctx context.Context, req oncekv.Request, lease time.Duration) (Claim, error)
	// ClaimWith is Claim with the outcome probe of opts on a takeover.
	ClaimWith(ctx context.Context, req oncekv.Request, lease time.Duration, opts *oncekv.ClaimOptions) (Claim, error)
	// Parked lists the parked keys, in the store's order.
	Parked(ctx context.Context) ([]oncekv.MarkInfo, error)
	ResolveParked(ctx context.Context, handler, key string, applied bool, response []byte) error
	NextFence(ctx context.Context, resource string) (uint64, error)
	// FencedWrite writes value for resource in the user's data only if
	// fence is greater than the one stored with it (Bucket.PutFenced; an
	// AdvanceFence and an UPDATE in one transaction).
	FencedWrite(ctx context.Context, resource string, fence uint64, value string) error
	// Value reads what FencedWrite wrote for resource, "" when nothing.
	Value(ctx context.Context, resource string) (string, error)
	// Count reads counter in the user's data, 0 when never incremented.
	Count(ctx context.Context, counter string) (int, error)
	Expire(ctx context.Context) (oncekv.ExpireStats, error)
	Now() time.Time
	Close() error
}

// Claim is a claim of either store.
type Claim interface {
	Done() bool
	Result() oncekv.Result
	Key() string
	Token() uint64
	TakenOver() (oncekv.Attempt, bool)
	LeaseUntil() time.Time
	Extend(ctx context.Context, lease time.Duration) error
	// Complete records the claim DONE with response, running e (if not
	// nil) in the same transaction.
	Complete(ctx context.Context, response []byte, e *Effect) (oncekv.Result, error)
	Fail(ctx context.Context, err error) error
}

// Effect is what a request's effect does in the store's transaction: add
// one to Counter (when not empty) in the user's data, call Hook (when not
// nil), and return Response and Err. A nil *Effect is no effect at all.
type Effect struct {
	Counter  string
	Response []byte
	Err      error
	Hook     func()
}

// The suite's defaults: windows of an hour, kept for a day.
const (
	retention = 24 * time.Hour
	span      = time.Hour
)

// start is where the suite's clock starts: the middle of a window.
var start = time.Date(2030, 1, 2, 3, 30, 0, 0, time.UTC)

// env is one test's store and clock.
type env struct {
	t   *testing.T
	h   *Harness
	clk *fakeclock.Timers
	cfg Config
	s   Store
}

func newEnv(t *testing.T, h *Harness) *env {
	clk := fakeclock.NewTimers(start)
	e := &env{t: t, h: h, clk: clk, cfg: Config{Retention: retention, WindowSpan: span, Now: clk.Now}}
	e.s = h.Open(t, e.cfg)
	t.Cleanup(func() { e.s.Close() })
	return e
}

// reopen closes the store and opens it again, with the same clock.
func (e *env) reopen() {
	e.t.Helper()
	s, err := e.h.Reopen(e.t, e.s, e.cfg)
	if err != nil {
		e.t.Fatalf("reopen: %v", err)
	}
	e.s = s
}

// Run runs the whole suite against h's stores.
func Run(t *testing.T, h *Harness) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"ApplyOnce", testApplyOnce},
		{"ResponseNilAndEmptyStayDistinct", testNilAndEmpty},
		{"HandlerScopesKey", testHandlerScopesKey},
		{"KeyReuse", testKeyReuse},
		{"Fingerprint", testFingerprint},
		{"EffectErrorRecordsNothing", testEffectError},
		{"PermanentFailureIsReplayed", testPermanent},
		{"ContextDoneBeforeApply", testContextBefore},
		{"ContextDoneDuringEffect", testContextDuring},
		{"BadInputChangesNothing", testBadInput},
		{"ResponseTooLarge", testResponseTooLarge},
		{"NilEffect", testNilEffect},
		{"ConcurrentSameKey", testConcurrentSameKey},
		{"ConcurrentDistinctKeys", testConcurrentDistinct},
		{"Closed", testClosed},
		{"Batch", testBatch},
		{"BatchOfDuplicates", testBatchDuplicates},
		{"ClaimAndComplete", testClaimComplete},
		{"ClaimKeyIsStable", testClaimKey},
		{"TakeoverFencesTheOldHolder", testTakeover},
		{"ApplyTakesOverAnExpiredClaim", testApplyTakeover},
		{"FailReleasesOrRecords", testFail},
		{"CompleteEffectError", testCompleteEffectError},
		{"ClaimDone", testClaimDone},
		{"ExtendAndLeases", testExtend},
		{"ClaimAcrossReopen", testClaimReopen},
		{"TakenOverSaysWhichAttempt", testTakenOver},
		{"ProbeAppliedRecordsDone", testProbeApplied},
		{"ProbeNotAppliedProceeds", testProbeNotApplied},
		{"ProbeErrorReleases", testProbeError},
		{"ProbeUnknownParks", testParked},
		{"ResolveParkedNotApplied", testResolveNotApplied},
		{"NextFence", testNextFence},
		{"FencedWrite", testFencedWrite},
		{"ClaimTokensFenceWrites", testClaimTokensFence},
		{"RetentionAndExpiry", testRetention},
		{"LiveLeaseKeepsItsWindow", testLeaseKeepsWindow},
		{"CompleteKeepsRetentionFromCompletion", testCompleteKeepsRetention},
		{"ClockSteppedBack", testClockBack},
		{"WindowSpanIsFixed", testWindowSpanFixed},
		{"TombstonesKeepDuplicatesSuppressed", testTombstones},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newEnv(t, h)) })
	}
}
