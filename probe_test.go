package oncekv_test

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// scriptedProbe answers each call with the next of its answers and records
// what it was asked.
type scriptedProbe struct {
	mu      sync.Mutex
	answers []probeAnswer
	asked   []oncekv.Attempt
	keys    []string
}

type probeAnswer struct {
	outcome oncekv.Outcome
	resp    []byte
	err     error
}

func (p *scriptedProbe) probe(_ context.Context, key string, prev oncekv.Attempt) (oncekv.Outcome, []byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked, p.keys = append(p.asked, prev), append(p.keys, key)
	a := p.answers[0]
	if len(p.answers) > 1 {
		p.answers = p.answers[1:]
	}
	return a.outcome, a.resp, a.err
}

func (p *scriptedProbe) calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.asked)
}

// abandon claims req and leaves the claim to run out, as a worker that
// died after (or before) its external call would.
func abandon(t *testing.T, db *oncekv.DB, clock *oncetest.Clock, req oncekv.Request) *oncekv.Claim {
	t.Helper()
	c := mustClaim(t, db, req)
	_, taken := c.TakenOver()
	require.False(t, taken, "a key's first claim took nothing over")
	clock.Advance(2 * lease)
	return c
}

func TestClaimTakenOverSaysWhatItTookOver(t *testing.T) {
	db, clock := openClocked(t)
	ctx := context.Background()
	first := abandon(t, db, clock, welcome)
	second := mustClaim(t, db, welcome)
	prev, taken := second.TakenOver()
	require.True(t, taken)
	require.Equal(t, oncekv.Attempt{Handler: welcome.Handler, Key: welcome.Key, Token: first.Token(), Started: claimEpoch, Takeovers: 1}, prev)

	clock.Advance(2 * lease)
	third := mustClaim(t, db, welcome)
	prev, taken = third.TakenOver()
	require.True(t, taken)
	require.Equal(t, oncekv.Attempt{Handler: welcome.Handler, Key: welcome.Key, Token: second.Token(),
		Started: claimEpoch.Add(2 * lease), Takeovers: 2}, prev, "the second attempt started at its takeover")

	// Released by the holder's Fail: the next claim takes it over too.
	require.NoError(t, third.Fail(ctx, errors.New("gateway timeout")))
	fourth := mustClaim(t, db, welcome)
	prev, taken = fourth.TakenOver()
	require.True(t, taken)
	require.Equal(t, third.Token(), prev.Token)
	require.Equal(t, 3, prev.Takeovers)
	_, err := fourth.Complete(ctx, []byte("sent"), nil)
	require.NoError(t, err)

	m, err := db.Mark(welcome.Handler, welcome.Key)
	require.NoError(t, err)
	require.Equal(t, 3, m.Takeovers, "the final mark keeps the count")
	require.True(t, m.AttemptStarted.IsZero(), "a final mark has no attempt in flight")
	st := db.Stats().Handlers[welcome.Handler]
	require.EqualValues(t, 3, st.Takeovers)

	done, err := db.Claim(ctx, welcome, lease)
	require.NoError(t, err)
	_, taken = done.TakenOver()
	require.False(t, taken, "a claim found Done took nothing over")
}

func TestClaimWithProbeApplied(t *testing.T) {
	db, clock := openClocked(t)
	ctx := context.Background()
	first := abandon(t, db, clock, welcome)
	p := &scriptedProbe{answers: []probeAnswer{{outcome: oncekv.OutcomeApplied, resp: []byte("msg-id 7")}}}
	c, err := db.ClaimWith(ctx, welcome, lease, &oncekv.ClaimOptions{Probe: p.probe})
	require.NoError(t, err)
	require.True(t, c.Done(), "the probe found the e-mail sent: nothing to run")
	require.Equal(t, oncekv.Result{Response: []byte("msg-id 7"), Duplicate: true, FirstSeen: claimEpoch}, c.Result())
	require.Equal(t, []string{first.Key()}, p.keys, "the probe gets the idempotency key the first attempt handed over")
	require.Equal(t, first.Token(), p.asked[0].Token)
	_, err = c.Complete(ctx, []byte("again"), nil)
	require.ErrorIs(t, err, oncekv.ErrClaimDone)

	res, err := db.Apply(ctx, welcome, mustNotApply(t))
	require.NoError(t, err)
	require.Equal(t, "msg-id 7", string(res.Response))
	require.True(t, res.Duplicate)
	st := db.Stats().Handlers[welcome.Handler]
	require.EqualValues(t, 1, st.ProbeApplied)
	require.EqualValues(t, 1, st.Takeovers)
	require.Zero(t, st.Applied, "the effect was not applied by this store's call")

	// The zombie wakes up: fenced, the DONE mark stays.
	_, err = first.Complete(ctx, []byte("zombie"), nil)
	require.ErrorIs(t, err, oncekv.ErrFenced)
}

func TestClaimWithProbeNotApplied(t *testing.T) {
	db, clock := openClocked(t)
	ctx := context.Background()
	abandon(t, db, clock, welcome)
	p := &scriptedProbe{answers: []probeAnswer{{outcome: oncekv.OutcomeNotApplied}}}
	c, err := db.ClaimWith(ctx, welcome, lease, &oncekv.ClaimOptions{Probe: p.probe})
	require.NoError(t, err)
	require.False(t, c.Done(), "nothing was sent: the caller sends it")
	_, err = c.Complete(ctx, []byte("sent"), nil)
	require.NoError(t, err)
	require.Equal(t, 1, p.calls())

	// A first attempt runs no probe, nor does a key found DONE.
	other := welcome
	other.Key = "welcome-43"
	c, err = db.ClaimWith(ctx, other, lease, &oncekv.ClaimOptions{Probe: p.probe})
	require.NoError(t, err)
	require.False(t, c.Done())
	c, err = db.ClaimWith(ctx, welcome, lease, &oncekv.ClaimOptions{Probe: p.probe})
	require.NoError(t, err)
	require.True(t, c.Done())
	require.Equal(t, 1, p.calls())
}

func TestClaimWithProbeUnknownParksTheKey(t *testing.T) {
	clock := oncetest.NewClock(claimEpoch)
	path := filepath.Join(t.TempDir(), "parked.db")
	opts := &oncekv.Options{NoSync: true, Now: clock.Now, ExpireInterval: -1}
	db, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	ctx := context.Background()
	first := abandon(t, db, clock, welcome)
	p := &scriptedProbe{answers: []probeAnswer{{outcome: oncekv.OutcomeUnknown}}}
	probed := &oncekv.ClaimOptions{Probe: p.probe}
	c, err := db.ClaimWith(ctx, welcome, lease, probed)
	require.Nil(t, c)
	var pe *oncekv.ParkedError
	require.ErrorAs(t, err, &pe)
	require.ErrorIs(t, err, oncekv.ErrParked)
	require.Equal(t, oncekv.GiveUp, oncekv.Classify(err).Action, "a parked key pages a human")
	require.Equal(t, first.Token(), pe.Attempt.Token, "the attempt in doubt is the one taken over")
	require.Equal(t, claimEpoch, pe.Attempt.Started)
	parkedAt := clock.Now()

	// Nothing runs and nothing is dropped: every way in is refused.
	for name, try := range map[string]func() error{
		"apply": func() error { _, err := db.Apply(ctx, welcome, mustNotApply(t)); return err },
		"claim": func() error { _, err := db.Claim(ctx, welcome, lease); return err },
		"probed claim": func() error {
			_, err := db.ClaimWith(ctx, welcome, lease, probed)
			return err
		},
		"batch": func() error {
			res, err := db.ApplyBatch(ctx, []oncekv.Request{welcome}, func(*oncekv.Tx, int) ([]byte, error) {
				t.Error("the effect ran")
				return nil, nil
			})
			require.NoError(t, err)
			return res[0].Err
		},
		"forget": func() error { return db.Forget(welcome.Handler, welcome.Key) },
		"zombie": func() error { _, err := first.Complete(ctx, []byte("late"), nil); return err },
	} {
		err := try()
		if name == "zombie" {
			require.ErrorIs(t, err, oncekv.ErrFenced, name)
			continue
		}
		require.ErrorIs(t, err, oncekv.ErrParked, name)
	}
	clock.Advance(time.Hour)
	_, err = db.Apply(ctx, welcome, mustNotApply(t))
	require.ErrorIs(t, err, oncekv.ErrParked, "a parked key has no lease to run out")
	require.Equal(t, 1, p.calls(), "a parked key is not probed again")

	st := db.Stats()
	require.EqualValues(t, 1, st.ParkedKeys)
	require.EqualValues(t, 1, st.Handlers[welcome.Handler].Parked)
	require.EqualValues(t, 5, st.Handlers[welcome.Handler].ParkedAnswers)

	// Kept across a reopen, listed with the attempt in doubt.
	require.NoError(t, db.Close())
	db, err = oncekv.Open(path, opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	var listed []oncekv.MarkInfo
	require.NoError(t, db.Parked(func(m oncekv.MarkInfo) error { listed = append(listed, m); return nil }))
	require.Len(t, listed, 1)
	m := listed[0]
	require.Equal(t, oncekv.MarkParked, m.State)
	require.Equal(t, "PARKED", m.State.String())
	require.Equal(t, first.Token(), m.Token)
	require.Equal(t, claimEpoch, m.AttemptStarted)
	require.Equal(t, parkedAt, m.ParkedAt)
	require.Equal(t, first.Key(), m.ClaimKey)
	one, err := db.Mark(welcome.Handler, welcome.Key)
	require.NoError(t, err)
	require.Equal(t, m, one)
	require.EqualValues(t, 1, db.Stats().ParkedKeys)
	requireCheckClean(t, db)

	// The operator found the e-mail sent.
	require.ErrorIs(t, db.ResolveParked(welcome.Handler, "welcome-43", true, nil), oncekv.ErrNotFound)
	require.NoError(t, db.ResolveParked(welcome.Handler, welcome.Key, true, []byte("msg-id 7")))
	require.ErrorIs(t, db.ResolveParked(welcome.Handler, welcome.Key, true, nil), oncekv.ErrNotParked)
	res, err := db.Apply(ctx, welcome, mustNotApply(t))
	require.NoError(t, err)
	require.Equal(t, "msg-id 7", string(res.Response))
	require.Zero(t, db.Stats().ParkedKeys)
	requireCheckClean(t, db)
}

func TestResolveParkedNotAppliedMakesTheKeyClaimable(t *testing.T) {
	db, clock := openClocked(t)
	ctx := context.Background()
	abandon(t, db, clock, welcome)
	p := &scriptedProbe{answers: []probeAnswer{{outcome: oncekv.Outcome(9)}}} // unknown values park too
	_, err := db.ClaimWith(ctx, welcome, lease, &oncekv.ClaimOptions{Probe: p.probe})
	require.ErrorIs(t, err, oncekv.ErrParked)
	require.NoError(t, db.ResolveParked(welcome.Handler, welcome.Key, false, nil))
	c, err := db.ClaimWith(ctx, welcome, lease, &oncekv.ClaimOptions{Probe: p.probe})
	require.NoError(t, err)
	_, taken := c.TakenOver()
	require.False(t, taken, "resolved as not applied: a fresh first attempt")
	require.Equal(t, 1, p.calls(), "no probe for a fresh attempt")
	_, err = c.Complete(ctx, []byte("sent"), nil)
	require.NoError(t, err)
	require.Zero(t, db.Stats().ParkedKeys)
}

func TestClaimWithProbeErrorReleasesTheKey(t *testing.T) {
	db, clock := openClocked(t)
	ctx := context.Background()
	abandon(t, db, clock, welcome)
	down := errors.New("status API: 503")
	p := &scriptedProbe{answers: []probeAnswer{{err: down}, {outcome: oncekv.OutcomeNotApplied}}}
	_, err := db.ClaimWith(ctx, welcome, lease, &oncekv.ClaimOptions{Probe: p.probe})
	require.ErrorIs(t, err, down)
	require.Equal(t, oncekv.RetryLater, oncekv.Classify(err).Action)
	// Released at once: no waiting for the prober's lease.
	c, err := db.ClaimWith(ctx, welcome, lease, &oncekv.ClaimOptions{Probe: p.probe})
	require.NoError(t, err)
	require.False(t, c.Done())
	require.Equal(t, 2, p.calls())
	prev, _ := c.TakenOver()
	require.Equal(t, 2, prev.Takeovers)
}

func TestClaimWithProbePanicOrGoexitReleasesTheKey(t *testing.T) {
	db, clock := openClocked(t)
	ctx := context.Background()
	abandon(t, db, clock, welcome)
	boom := func(context.Context, string, oncekv.Attempt) (oncekv.Outcome, []byte, error) { panic("probe bug") }
	require.PanicsWithValue(t, "probe bug", func() {
		_, _ = db.ClaimWith(ctx, welcome, lease, &oncekv.ClaimOptions{Probe: boom})
	})
	exit := func(context.Context, string, oncekv.Attempt) (oncekv.Outcome, []byte, error) {
		runtime.Goexit()
		return oncekv.OutcomeApplied, nil, nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = db.ClaimWith(ctx, welcome, lease, &oncekv.ClaimOptions{Probe: exit})
		t.Error("ClaimWith returned after the probe's Goexit")
	}()
	<-done
	p := &scriptedProbe{answers: []probeAnswer{{outcome: oncekv.OutcomeNotApplied}}}
	c, err := db.ClaimWith(ctx, welcome, lease, &oncekv.ClaimOptions{Probe: p.probe})
	require.NoError(t, err, "released after the panic and the Goexit, with no wait for a lease")
	prev, _ := c.TakenOver()
	require.Equal(t, 3, prev.Takeovers)
}

// TestClaimWithProbeFencedWhileProbing: the probe outlives its claim's
// lease and another worker takes the key over meanwhile; the slow
// prober's answer is refused with ErrFenced and changes nothing.
func TestClaimWithProbeFencedWhileProbing(t *testing.T) {
	db, clock := openClocked(t)
	ctx := context.Background()
	abandon(t, db, clock, welcome)
	var inner *oncekv.Claim
	slow := func(ctx context.Context, key string, prev oncekv.Attempt) (oncekv.Outcome, []byte, error) {
		clock.Advance(2 * lease)
		var err error
		inner, err = db.ClaimWith(ctx, welcome, lease, &oncekv.ClaimOptions{Probe: func(context.Context, string, oncekv.Attempt) (oncekv.Outcome, []byte, error) {
			return oncekv.OutcomeNotApplied, nil, nil
		}})
		require.NoError(t, err)
		return oncekv.OutcomeApplied, []byte("stale answer"), nil
	}
	_, err := db.ClaimWith(ctx, welcome, lease, &oncekv.ClaimOptions{Probe: slow})
	require.ErrorIs(t, err, oncekv.ErrFenced)
	require.False(t, inner.Done())
	_, err = inner.Complete(ctx, []byte("sent"), nil)
	require.NoError(t, err, "the worker that took over holds the key")
}

func TestParkedKeysAtMaxParked(t *testing.T) {
	clock := oncetest.NewClock(claimEpoch)
	db := oncetest.Open(t, &oncekv.Options{NoSync: true, Now: clock.Now, MaxParked: 1})
	ctx := context.Background()
	other := welcome
	other.Key = "welcome-43"
	abandon(t, db, clock, welcome)
	abandon(t, db, clock, other)
	_, err := db.ClaimWith(ctx, welcome, lease, unknown)
	require.ErrorIs(t, err, oncekv.ErrParked)
	_, err = db.ClaimWith(ctx, other, lease, unknown)
	require.ErrorIs(t, err, oncekv.ErrParkFull)
	require.Equal(t, oncekv.GiveUp, oncekv.Classify(err).Action)
	m, err := db.Mark(other.Handler, other.Key)
	require.NoError(t, err)
	require.Equal(t, oncekv.MarkInProgress, m.State, "not parked: still in doubt, claimable")
	require.True(t, m.Released)
	st := db.Stats()
	require.EqualValues(t, 1, st.ParkedKeys)
	require.EqualValues(t, 1, st.Handlers[other.Handler].ParkRefused)

	// Room again once the first is resolved: the next takeover probes and parks.
	require.NoError(t, db.ResolveParked(welcome.Handler, welcome.Key, false, nil))
	_, err = db.ClaimWith(ctx, other, lease, unknown)
	require.ErrorIs(t, err, oncekv.ErrParked)
}

// TestParkedKeyOutlivesItsWindow: expiry carries a parked mark to the
// newest window before its own expires, however long it waits, across
// reopens; the windows themselves still expire on time.
func TestParkedKeyOutlivesItsWindow(t *testing.T) {
	clock := oncetest.NewClock(claimEpoch)
	path := filepath.Join(t.TempDir(), "parked.db")
	opts := &oncekv.Options{NoSync: true, Now: clock.Now, ExpireInterval: -1, Retention: 2 * time.Hour, WindowSpan: time.Hour}
	db, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	ctx := context.Background()
	abandon(t, db, clock, welcome)
	_, err = db.ClaimWith(ctx, welcome, lease, unknown)
	require.ErrorIs(t, err, oncekv.ErrParked)
	neighbour := oncekv.Request{Handler: "email", Key: "neighbour", Payload: []byte("x")}
	_, err = db.Apply(ctx, neighbour, nil)
	require.NoError(t, err)
	for day := range 3 {
		clock.Advance(24 * time.Hour)
		st, err := db.Expire(ctx)
		require.NoError(t, err)
		require.Positive(t, st.Windows, "day %d: the windows expire", day)
		_, err = db.Apply(ctx, welcome, mustNotApply(t))
		require.ErrorIs(t, err, oncekv.ErrParked, "day %d", day)
		require.NoError(t, db.Close())
		db, err = oncekv.Open(path, opts)
		require.NoError(t, err)
		requireCheckClean(t, db)
	}
	res, err := db.Apply(ctx, neighbour, nil)
	require.NoError(t, err)
	require.False(t, res.Duplicate, "the neighbour's mark expired with its window")
	var n int
	require.NoError(t, db.Parked(func(m oncekv.MarkInfo) error {
		n++
		require.Equal(t, claimEpoch, m.FirstSeen)
		require.True(t, m.Window.After(claimEpoch.Add(48*time.Hour)), "carried to a newer window")
		return nil
	}))
	require.Equal(t, 1, n)
	require.NoError(t, db.ResolveParked(welcome.Handler, welcome.Key, true, []byte("sent")))
	res, err = db.Apply(ctx, welcome, mustNotApply(t))
	require.NoError(t, err)
	require.Equal(t, claimEpoch, res.FirstSeen)
	require.NoError(t, db.Close())
	oncetest.Check(t, path)
}

// unknown is a probe that can never tell.
var unknown = &oncekv.ClaimOptions{Probe: func(context.Context, string, oncekv.Attempt) (oncekv.Outcome, []byte, error) {
	return oncekv.OutcomeUnknown, nil, nil
}}

// requireCheckClean runs DB.Check and requires no problem.
func requireCheckClean(t *testing.T, db *oncekv.DB) {
	t.Helper()
	require.NoError(t, db.Check(func(problem error) error { return problem }))
}
