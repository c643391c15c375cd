// Package idemhttptest is the test suite of package idemhttp's middleware,
// run against each store it works on: the embedded *oncekv.DB (from
// idemhttp's tests) and PostgreSQL (from the postgres module's pgidem
// tests), so the HTTP semantics are tested once whatever the store. A
// store joins by implementing Store and calling Run from its tests.
package idemhttptest

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/httpbridge"
)

// Harness opens the stores of one run of the suite.
type Harness struct {
	// Open opens an empty store for one test, whose leases, windows and
	// Retry-After go by now; it closes it when the test ends.
	Open func(t *testing.T, now func() time.Time) Store
}

// Store is one store under test, seen from the middleware's user.
type Store interface {
	// New builds the middleware on the store (idemhttp.New or its
	// adapter's New).
	New(opts *idemhttp.Options) (httpbridge.Middleware, error)
	// Put stages, in r's handler, a write of key=value into table, with
	// the store's Stage; StageNil stages a nil write; Fail a write that
	// returns err.
	Put(r *http.Request, table, key, value string) error
	StageNil(r *http.Request) error
	Fail(r *http.Request, err error) error
	// Keys lists the keys of table, sorted.
	Keys(t testing.TB, table string) []string
	// Close closes the store (the test's cleanup may close it again).
	Close() error
}

// env is one test's store and clock.
type env struct {
	s    Store
	clk  *Clock
	open func(t *testing.T, now func() time.Time) Store
}

// fresh returns another store on a clock of its own, for a subtest or a
// second server that must not share the test's records.
func (e *env) fresh(t *testing.T) *env {
	clk := NewClock()
	return &env{s: e.open(t, clk.Now), clk: clk, open: e.open}
}

// Run runs the suite against h's stores, each test on a store of its own.
func Run(t *testing.T, h *Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"FirstRequestStoredThenReplayed", testFirstRequestStoredThenReplayed},
		{"MethodsCovered", testMethodsCovered},
		{"MissingKey", testMissingKey},
		{"MalformedKey", testMalformedKey},
		{"ScopeIdentifiesTheCaller", testScopeIdentifiesTheCaller},
		{"KeysNeverCrossCallers", testKeysNeverCrossCallers},
		{"FingerprintMismatchIs422", testFingerprintMismatchIs422},
		{"BodyOverLimitIs413BeforeAnythingIsRecorded", testBodyOverLimitIs413BeforeAnythingIsRecorded},
		{"InProgressIs409WithRetryAfter", testInProgressIs409WithRetryAfter},
		{"HeartbeatKeepsTheKeyPastTheLease", testHeartbeatKeepsTheKeyPastTheLease},
		{"WithoutHeartbeatAnExpiredLeaseIsTakenOver", testWithoutHeartbeatAnExpiredLeaseIsTakenOver},
		{"ReplayIsByteForByte", testReplayIsByteForByte},
		{"WhatIsStored", testWhatIsStored},
		{"HandlerThatWritesNothingStoresA200", testHandlerThatWritesNothingStoresA200},
		{"PanicOrGoexitReleasesTheKey", testPanicOrGoexitReleasesTheKey},
		{"ClientGoneStoresNothing", testClientGoneStoresNothing},
		{"StagedWritesCommitWithTheResponse", testStagedWritesCommitWithTheResponse},
		{"FailedStagedWriteStoresNothing", testFailedStagedWriteStoresNothing},
		{"StagedWritesOfAResponseNotStoredAreDropped", testStagedWritesOfAResponseNotStoredAreDropped},
		{"StageErrors", testStageErrors},
		{"KeyIsStableAndTokenFences", testKeyIsStableAndTokenFences},
		{"ConcurrentIdenticalRequestsRunOnce", testConcurrentIdenticalRequestsRunOnce},
		{"FlushStreamsAndStillStores", testFlushStreamsAndStillStores},
		{"CommitFailureAfterFlushAbortsTheConnection", testCommitFailureAfterFlushAbortsTheConnection},
		{"BodyOverRecordCapStreamsAndIsOmitted", testBodyOverRecordCapStreamsAndIsOmitted},
		{"ProblemDetailsPerCase", testProblemDetailsPerCase},
		{"ClosedStoreIs503", testClosedStoreIs503},
		{"InformationalAndTrailersAreNotStored", testInformationalAndTrailersAreNotStored},
		{"MaxBodyBytesAtItsMaximumKeepsTheBody", testMaxBodyBytesAtItsMaximumKeepsTheBody},
		{"DeclaredContentLengthIsNotAllocated", testDeclaredContentLengthIsNotAllocated},
		{"FailedCommitAnswerCarriesNoneOfTheHandlersHeaders", testFailedCommitAnswerCarriesNoneOfTheHandlersHeaders},
		{"RetryAfterIsTheRemainingLease", testRetryAfterIsTheRemainingLease},
		{"ReplayKeepsContentEncoding", testReplayKeepsContentEncoding},
		{"DoNotStoreLetsACorrectedRequestReuseTheKey", testDoNotStoreLetsACorrectedRequestReuseTheKey},
		{"DoNotStoreErrors", testDoNotStoreErrors},
		{"ReplayedHeaderWithANewlineReplaysWhatWasSent", testReplayedHeaderWithANewlineReplaysWhatWasSent},
		{"ReplicaTakeoverFencesTheLateAnswer", testReplicaTakeoverFencesTheLateAnswer},
		{"KeyExpiresOnlyOnStoredAnswers", testKeyExpiresOnlyOnStoredAnswers},
		{"KeyExpiresOnReplaysOfAStreamedAnswer", testKeyExpiresOnReplaysOfAStreamedAnswer},
		{"HeaderConstantsAreWhatIsSent", testHeaderConstantsAreWhatIsSent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := NewClock()
			tc.fn(t, &env{s: h.Open(t, clk.Now), clk: clk, open: h.Open})
		})
	}
}

// serve starts a real server with h behind a middleware on the test's
// store, Scope defaulting to UserScope.
func (e *env) serve(t testing.TB, opts *idemhttp.Options, h http.Handler) *httptest.Server {
	t.Helper()
	o := idemhttp.Options{}
	if opts != nil {
		o = *opts
	}
	if o.Scope == nil {
		o.Scope = UserScope
	}
	mw, err := e.s.New(&o)
	require.NoError(t, err)
	return ServeRaw(t, mw.Wrap(h))
}

// put stages key=value into table from a handler, reporting an error.
func (e *env) put(t testing.TB, r *http.Request, table, key, value string) {
	t.Helper()
	Check(t, e.s.Put(r, table, key, value))
}

// fail stages a write failing with err, reporting an error of Stage.
func (e *env) fail(t testing.TB, r *http.Request, err error) {
	t.Helper()
	Check(t, e.s.Fail(r, err))
}

// keys lists the keys of table.
func (e *env) keys(t testing.TB, table string) []string {
	t.Helper()
	return e.s.Keys(t, table)
}
