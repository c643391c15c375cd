package oncekv

import (
	"context"
	"math"
	"time"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/layout"
)

// outcome classifies a request's end for the counters.
type outcome uint8

const (
	outcomeNone outcome = iota
	outcomeApplied
	outcomeDuplicate
	outcomeKeyReuse
	outcomeInProgress
	outcomeFailedRecorded
	outcomeFailedReplayed
	outcomeEffectError
	outcomeInvalid
	outcomeAborted // ctx done, commit failed, database problem
	outcomeFenced  // a claim operation by a worker that was taken over
	// A takeover's probe answered OutcomeApplied, recorded DONE.
	outcomeProbeApplied
	outcomeParked       // a takeover's probe answered OutcomeUnknown: parked
	outcomeParkRefused  // OutcomeUnknown at Options.MaxParked: ErrParkFull
	outcomeParkedAnswer // a request of a parked key: ErrParked
	outcomeCount        // the number of outcomes; keep last
)

// op is one request on its way through Apply or ApplyBatch.
type op struct {
	ctx    context.Context
	req    *Request
	mkey   []byte
	mhash  uint64 // bloom.Sum64(mkey): hashed once for the filters, the cache and the write path
	hash   [layout.HashSize]byte
	effect func(*Tx) ([]byte, error)
	index  int // position in ApplyBatch's reqs

	// The outcome, tentative until the transaction that decided it commits;
	// settled means it no longer depends on any commit.
	res     Result
	err     error
	kind    outcome
	settled bool
	// panicVal and goexit are a panic or runtime.Goexit of the effect (or of
	// its error's methods), raised again in the op's caller.
	panicVal any
	goexit   bool
	// hooks are the OnCommit hooks of the attempt that committed.
	hooks []func()
	// checkFrom is the oldest window the write path must look in: the
	// snapshot found older, sealed ones empty of the key.
	checkFrom int64
	// failWith is a permanent error to record as FAILED (message failMsg)
	// in the next attempt, without running the effect.
	failWith error
	failMsg  string
	// counts are what deciding the op moved in its last attempt.
	counts lookupCounts

	// wake carries true when the outcome is ready, false when the op is
	// promoted to lead the next commit; only queued ops have one.
	wake chan bool
	// detached: the effect runs on a goroutine of its own (see runEffect).
	detached bool
	// posted: o came through group.post (an Applier's), so no caller waits
	// for it on the goroutine that may lead its commit.
	posted bool
	// step, when not nil, makes o a claim's write, which decideOne runs in
	// place of Apply's logic (see decideStep).
	step func(w *writeTx) error
}

func (db *DB) newOp(ctx context.Context, req *Request, effect func(*Tx) ([]byte, error)) (*op, error) {
	mkey, err := markKey(req)
	if err != nil {
		return nil, err
	}
	hash, err := fingerprint(req)
	if err != nil {
		return nil, err
	}
	return &op{
		ctx:   ctx,
		req:   req,
		mkey:  mkey,
		mhash: bloom.Sum64(mkey),
		hash:  hash,
		// Until a snapshot has looked, every window must be read.
		checkFrom: math.MinInt64,
		effect:    effect,
	}, nil
}

// answer sets o's outcome from an existing mark, and reports false when the
// mark does not decide it (an expired claim, to take over).
func (o *op) answer(m *layout.FoundMark, now time.Time) bool {
	// A tombstone keeps no fingerprint: key reuse cannot be told.
	if !m.Tombstone && m.PayloadHash != o.hash {
		o.fail(outcomeKeyReuse, ErrKeyReuse)
		return true
	}
	switch m.State {
	case layout.Done:
		o.res = Result{Response: m.Response, Duplicate: true, FirstSeen: timeFromNano(m.FirstSeen), ResponseExpired: m.Tombstone}
		o.err, o.kind = nil, outcomeDuplicate
	case layout.Failed:
		o.res = Result{Duplicate: true, FirstSeen: timeFromNano(m.FirstSeen), ResponseExpired: m.Tombstone}
		o.err, o.kind = &FailedError{Message: m.Error}, outcomeFailedReplayed
	case layout.Parked:
		o.fail(outcomeParkedAnswer, &ParkedError{Attempt: attemptOf(o.req, &m.Mark)})
	case layout.InProgress:
		if now.UnixNano() >= m.LeaseUntil {
			return false
		}
		o.fail(outcomeInProgress, &InProgressError{until: timeFromNano(m.LeaseUntil)})
	}
	return true
}

func (o *op) fail(kind outcome, err error) {
	o.res, o.err, o.kind = Result{}, err, kind
}
