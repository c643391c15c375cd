package oncekv_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// modelChecks is how many rapid checks TestModelStateMachine runs unless
// -rapid.checks is given on the command line.
const modelChecks = 1000

// rapidChecksOnCommandLine reports whether -rapid.checks was given. It is
// read once, before withRapidChecks first sets the flag itself (flag.Set
// makes flag.Visit report it from then on).
var rapidChecksOnCommandLine = sync.OnceValue(func() bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	return set
})

// withRapidChecks runs fn with rapid's check count set to n, unless the
// command line set -rapid.checks, which then wins. (-short divides it by
// five, as rapid does.)
func withRapidChecks(t *testing.T, n int, fn func()) {
	if !rapidChecksOnCommandLine() {
		old := flag.Lookup("rapid.checks").Value.String()
		require.NoError(t, flag.Set("rapid.checks", strconv.Itoa(n)))
		defer func() { _ = flag.Set("rapid.checks", old) }()
	}
	fn()
}

// TestModelStateMachine drives the store and an in-memory model of it
// through random sequences of apply, duplicate, claim, extend, complete,
// fail, fence, fenced write, clock moves (backwards too), reopen and
// expire, and requires the same answer from both at every step. After every
// reopen and expiry it also probes every key the model holds: a Bloom
// filter that forgot a key would run its effect again. rapid prints the
// seed of a failure and shrinks it.
func TestModelStateMachine(t *testing.T) {
	withRapidChecks(t, modelChecks, func() {
		rapid.Check(t, func(rt *rapid.T) { runModel(t, rt, nil) })
	})
}

// Model configuration: narrow windows and a short retention, so that a
// few clock moves cross windows and expire them.
const (
	modelSpan      = time.Hour
	modelRetention = 6 * time.Hour
)

var modelKeys = []string{"k0", "k1", "k2", "k3"}

type mState uint8

const (
	mClaimed mState = iota + 1
	mDone
	mFailed
)

// mMark is the model of one key's mark.
type mMark struct {
	state      mState
	payload    byte
	resp       []byte
	failMsg    string
	token      uint64
	leaseUntil int64
	window     int64
}

// mClaim is a claim object the test holds, with what the model expects
// of it.
type mClaim struct {
	c     *oncekv.Claim
	key   string
	token uint64
	ended bool  // completed, failed or released: ErrClaimDone from now on
	lost  error // fenced: repeated to every later call
}

// storeModel is the state machine: the store under test and its model.
type storeModel struct {
	t     *testing.T
	path  string
	hook  func(bool) bool
	clock *oncetest.Clock
	db    *oncekv.DB

	marks     map[string]*mMark
	runs      map[string]uint64 // how many times each key's effect committed
	claims    []*mClaim
	lastToken uint64
	high      int64 // the store's monotonic clock
	saved     int64 // the clock's high-water mark as the file holds it
	windows   map[int64]bool
	leaseEnds map[int64]int64 // latest lease end written in each window
	newest    int64           // newest live window; math.MinInt64 when none
	floor     int64
	issued    map[string]uint64 // NextFence per resource
	regVal    map[string]uint64
	regFence  map[string]uint64
}

func runModel(t *testing.T, rt *rapid.T, hook func(bool) bool) {
	m := &storeModel{
		t: t, hook: hook,
		path:    filepath.Join(t.TempDir(), "model.db"),
		clock:   oncetest.NewClock(time.Date(2026, 3, 1, 0, 30, 0, 0, time.UTC)),
		marks:   map[string]*mMark{},
		runs:    map[string]uint64{},
		windows: map[int64]bool{}, leaseEnds: map[int64]int64{},
		newest: math.MinInt64, floor: math.MinInt64, saved: math.MinInt64,
		issued: map[string]uint64{}, regVal: map[string]uint64{}, regFence: map[string]uint64{},
	}
	m.open(rt)
	defer func() {
		require.NoError(rt, m.db.Close())
		oncetest.Check(t, m.path)
	}()
	rt.Repeat(map[string]func(*rapid.T){
		"apply":     m.apply,
		"duplicate": m.duplicate,
		"claim":     m.claim,
		"extend":    m.extend,
		"complete":  m.complete,
		"fail":      m.fail,
		"fence":     m.fence,
		"clock":     m.advance,
		"reopen":    m.reopen,
		"expire":    m.expire,
		"":          m.check,
	})
}

func (m *storeModel) open(rt *rapid.T) {
	db, err := oncekv.Open(m.path, &oncekv.Options{
		NoSync: true, Now: m.clock.Now, ExpireInterval: -1,
		WindowSpan: modelSpan, Retention: modelRetention,
		// The model's clock moves by up to 10 hours a step, so a few steps
		// without an operation that reads it would look like a glitch
		// (TestOneFutureClockReadingDoesNotFreezeTheStore and its
		// neighbours test that bound; the model does not model it).
		MaxClockJump: -1,
	})
	require.NoError(rt, err)
	if m.hook != nil {
		oncekv.SetFilterHook(db, m.hook)
	}
	m.db = db
}

// now is the store's reading of its monotonic clock for an operation.
func (m *storeModel) now() int64 {
	m.high = max(m.high, m.clock.Now().UnixNano())
	return m.high
}

// nowFor is now for an Apply or Claim of a key, with payload, whose live
// mark is mk: every request reads the store's clock (a claim's lease and a
// new mark need the time, and a duplicate or a replayed failure counts its
// age for the window advisor), except one refused as key reuse by a final
// mark, which answers it without the time (a claimed mark's look-up reads
// the clock before it compares payloads).
func (m *storeModel) nowFor(mk *mMark, payload byte) int64 {
	if mk != nil && mk.payload != payload && mk.state != mClaimed {
		return m.high
	}
	return m.now()
}

func startOf(n int64) int64 {
	span := int64(modelSpan)
	s := n - n%span
	if n < 0 && n%span != 0 {
		s -= span
	}
	return s
}

// place is window.Config.Place: the window of now, never older than the
// newest live window nor below the expiry floor.
func (m *storeModel) place(now int64) int64 {
	s := max(startOf(now), m.newest)
	if m.floor > s {
		s = startOf(m.floor)
		if s < m.floor {
			s += int64(modelSpan)
		}
	}
	return s
}

// markIn records that a mark committed in window w.
func (m *storeModel) markIn(key string, w int64, mk *mMark) {
	mk.window = w
	m.marks[key] = mk
	m.windows[w] = true
	m.newest = max(m.newest, w)
}

// keep returns the window a rewritten mark goes into: the one it is in,
// unless that expires before until (its lease's end, or Retention after a
// completion), then the window a new mark would go into now.
func (m *storeModel) keep(w, now, until int64) int64 {
	if w+int64(modelSpan)+int64(modelRetention) < until {
		return m.place(now)
	}
	return w
}

// leased records a lease written in window w: expiry keeps w until it ends.
func (m *storeModel) leased(w, until int64) {
	if e, ok := m.leaseEnds[w]; !ok || until > e {
		m.leaseEnds[w] = until
	}
}

// reaches calls the store's clock for an operation of c that reaches the
// store: one refused by the claim itself (lost or ended) does not.
func (m *storeModel) reaches(c *mClaim) int64 {
	if c.lost != nil || c.ended {
		return 0
	}
	return m.now()
}

// live returns key's mark, if it has one that has not expired.
func (m *storeModel) live(key string) *mMark {
	mk := m.marks[key]
	if mk == nil || mk.window < m.floor {
		return nil
	}
	return mk
}

func drawResponse(rt *rapid.T) []byte {
	return rapid.SampledFrom([][]byte{nil, {}, []byte("r"), bytes.Repeat([]byte{0xff}, 300)}).Draw(rt, "response")
}

// effect counts a committed run in the user bucket and then succeeds,
// fails transiently or fails permanently.
func (m *storeModel) effect(key string, resp []byte, fail int, ran *bool) func(tx *oncekv.Tx) ([]byte, error) {
	return func(tx *oncekv.Tx) ([]byte, error) {
		*ran = true
		b, err := tx.CreateBucketIfNotExists(accounts)
		if err != nil {
			return nil, err
		}
		if err := b.Put([]byte(key), uintBytes(readUint(b.Get([]byte(key)))+1)); err != nil {
			return nil, err
		}
		switch fail {
		case 1:
			return nil, errors.New("transient")
		case 2:
			return nil, oncekv.Permanent(errors.New("permanent " + key))
		}
		return resp, nil
	}
}

// expectKnown checks an answer that an existing mark decides; it reports
// false when the request may proceed (no mark, or an expired claim).
func (m *storeModel) expectKnown(rt *rapid.T, mk *mMark, payload byte, now int64, err error, dup bool, resp []byte) bool {
	switch {
	case mk == nil:
		return false
	case mk.payload != payload:
		require.ErrorIs(rt, err, oncekv.ErrKeyReuse)
	case mk.state == mDone:
		require.NoError(rt, err)
		require.True(rt, dup)
		require.Equal(rt, mk.resp, resp)
		require.Equal(rt, mk.resp == nil, resp == nil, "nil and empty responses stay distinct")
	case mk.state == mFailed:
		var fe *oncekv.FailedError
		require.ErrorAs(rt, err, &fe)
		require.Equal(rt, mk.failMsg, fe.Message)
	case now < mk.leaseUntil:
		require.ErrorIs(rt, err, oncekv.ErrInProgress)
	default:
		return false
	}
	return true
}

func (m *storeModel) apply(rt *rapid.T) {
	key := rapid.SampledFrom(modelKeys).Draw(rt, "key")
	payload := byte(rapid.IntRange(0, 5).Draw(rt, "payload") / 5) // mostly 0: reuse is rare
	m.applyKey(rt, key, payload)
}

// duplicate re-delivers a key the model holds, with its first payload.
func (m *storeModel) duplicate(rt *rapid.T) {
	var held []string
	for _, k := range modelKeys {
		if m.marks[k] != nil {
			held = append(held, k)
		}
	}
	if len(held) == 0 {
		rt.Skip("nothing to duplicate")
	}
	k := rapid.SampledFrom(held).Draw(rt, "key")
	m.applyKey(rt, k, m.marks[k].payload)
}

func (m *storeModel) applyKey(rt *rapid.T, key string, payload byte) {
	resp := drawResponse(rt)
	fail := rapid.IntRange(0, 9).Draw(rt, "fail") / 8 // 0 mostly, then transient, permanent
	if rapid.IntRange(0, 9).Draw(rt, "permanent") == 0 {
		fail = 2
	}
	var ran bool
	res, err := m.db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: key, Payload: []byte{payload}},
		m.effect(key, resp, fail, &ran))
	mk := m.live(key)
	now := m.nowFor(mk, payload)
	if m.expectKnown(rt, mk, payload, now, err, res.Duplicate, res.Response) {
		require.False(rt, ran, "the effect ran for a key its mark answers")
		return
	}
	require.True(rt, ran, "the effect did not run for a free key")
	window := int64(0)
	if mk != nil {
		// A takeover keeps the window first seen, unless the mark would
		// expire there sooner than Retention from now.
		window = m.keep(mk.window, now, now+int64(modelRetention))
	} else {
		window = m.place(now)
	}
	switch fail {
	case 1:
		require.ErrorContains(rt, err, "transient")
	case 2:
		var fe *oncekv.FailedError
		require.ErrorAs(rt, err, &fe)
		m.markIn(key, window, &mMark{state: mFailed, payload: payload, failMsg: fe.Message})
	default:
		require.NoError(rt, err)
		require.False(rt, res.Duplicate)
		require.Equal(rt, resp, res.Response)
		require.Equal(rt, resp == nil, res.Response == nil)
		m.markIn(key, window, &mMark{state: mDone, payload: payload, resp: resp})
		m.runs[key]++
	}
}

func (m *storeModel) claim(rt *rapid.T) {
	key := rapid.SampledFrom(modelKeys).Draw(rt, "key")
	payload := byte(rapid.IntRange(0, 5).Draw(rt, "payload") / 5)
	lease := time.Duration(rapid.IntRange(1, 180).Draw(rt, "lease-min")) * time.Minute
	c, err := m.db.Claim(context.Background(), oncekv.Request{Handler: "h", Key: key, Payload: []byte{payload}}, lease)
	mk := m.live(key)
	now := m.nowFor(mk, payload)
	var dup bool
	var resp []byte
	if err == nil && c.Done() {
		dup, resp = true, c.Result().Response
	}
	if m.expectKnown(rt, mk, payload, now, err, dup, resp) {
		return
	}
	require.NoError(rt, err)
	require.False(rt, c.Done())
	require.Greater(rt, c.Token(), m.lastToken, "tokens only grow")
	m.lastToken = c.Token()
	window := int64(0)
	if mk != nil {
		window = m.keep(mk.window, now, now+int64(lease))
	} else {
		window = m.place(now)
	}
	m.markIn(key, window, &mMark{state: mClaimed, payload: payload, token: c.Token(), leaseUntil: now + int64(lease)})
	m.leased(window, now+int64(lease))
	m.claims = append(m.claims, &mClaim{c: c, key: key, token: c.Token()})
}

// pickClaim draws one of the claims the test holds.
func (m *storeModel) pickClaim(rt *rapid.T) *mClaim {
	if len(m.claims) == 0 {
		rt.Skip("no claim held")
	}
	return m.claims[rapid.IntRange(0, len(m.claims)-1).Draw(rt, "claim")]
}

// holds reports whether the model says c still holds its key, and else
// expects err to be the right refusal.
func (m *storeModel) holds(rt *rapid.T, c *mClaim, err error) bool {
	switch {
	case c.lost != nil:
		require.ErrorIs(rt, err, oncekv.ErrFenced)
	case c.ended:
		require.ErrorIs(rt, err, oncekv.ErrClaimDone)
	default:
		mk := m.live(c.key)
		if mk != nil && mk.state == mClaimed && mk.token == c.token {
			return true
		}
		require.ErrorIs(rt, err, oncekv.ErrFenced, "a claim that was taken over, or whose mark expired")
		c.lost = err
	}
	return false
}

func (m *storeModel) extend(rt *rapid.T) {
	c := m.pickClaim(rt)
	lease := time.Duration(rapid.IntRange(1, 180).Draw(rt, "lease-min")) * time.Minute
	err := c.c.Extend(context.Background(), lease)
	now := m.reaches(c)
	if m.holds(rt, c, err) {
		require.NoError(rt, err)
		mk := m.marks[c.key]
		mk.leaseUntil = now + int64(lease)
		m.markIn(c.key, m.keep(mk.window, now, mk.leaseUntil), mk)
		m.leased(mk.window, mk.leaseUntil)
	}
}

func (m *storeModel) complete(rt *rapid.T) {
	c := m.pickClaim(rt)
	resp := drawResponse(rt)
	var ran bool
	res, err := c.c.Complete(context.Background(), resp, func(tx *oncekv.Tx) error {
		_, err := m.effect(c.key, nil, 0, &ran)(tx)
		return err
	})
	now := m.reaches(c)
	if !m.holds(rt, c, err) {
		require.False(rt, ran)
		return
	}
	require.NoError(rt, err)
	require.Equal(rt, resp, res.Response)
	require.Equal(rt, resp == nil, res.Response == nil)
	mk := m.marks[c.key]
	mk.state, mk.resp, mk.leaseUntil = mDone, resp, 0
	m.markIn(c.key, m.keep(mk.window, now, now+int64(modelRetention)), mk) // deduplicated Retention after completion
	m.runs[c.key]++
	c.ended = true
}

func (m *storeModel) fail(rt *rapid.T) {
	c := m.pickClaim(rt)
	err := c.c.Fail(context.Background(), errors.New("upstream 503"))
	m.reaches(c)
	if m.holds(rt, c, err) {
		require.NoError(rt, err)
		m.marks[c.key].leaseUntil = math.MinInt64 // released: free at once
		c.ended = true
	}
}

// fence takes a token for a resource and writes its register with it, or
// with a stale token, fence 0, or the greatest fence.
func (m *storeModel) fence(rt *rapid.T) {
	res := rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "resource")
	tok, err := m.db.NextFence(res)
	m.now()
	require.NoError(rt, err)
	require.Equal(rt, m.issued[res]+1, tok)
	m.issued[res] = tok
	f := rapid.SampledFrom([]uint64{tok, tok, tok - 1, 0, math.MaxUint64}).Draw(rt, "fence")
	val := rapid.Uint64().Draw(rt, "value")
	err = m.db.Update(func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("regs"))
		if err != nil {
			return err
		}
		return b.PutFenced([]byte(res), uintBytes(val), f)
	})
	m.now()
	switch {
	case f == 0:
		require.ErrorIs(rt, err, oncekv.ErrInvalidFence)
	case f <= m.regFence[res]:
		var fe *oncekv.FenceError
		require.ErrorAs(rt, err, &fe)
		require.Equal(rt, m.regFence[res], fe.Stored)
		require.Equal(rt, f, fe.Presented)
	default:
		require.NoError(rt, err)
		m.regVal[res], m.regFence[res] = val, f
	}
}

// advance moves the clock, mostly forward, sometimes back (an NTP step, a
// VM restored from a snapshot).
func (m *storeModel) advance(rt *rapid.T) {
	minutes := rapid.IntRange(-120, 600).Draw(rt, "minutes")
	m.clock.Advance(time.Duration(minutes) * time.Minute)
}

// reopen closes and reopens the store. Claims held die with the DB
// handle; their marks stay, released: the reopened store knows their
// holders are gone (Options.KeepOrphanedClaims is not set).
func (m *storeModel) reopen(rt *rapid.T) {
	require.NoError(rt, m.db.Close())
	for _, c := range m.claims {
		require.ErrorIs(rt, c.c.Extend(context.Background(), time.Minute), oncekv.ErrClosed)
	}
	m.claims = nil
	// Close saves the store's latest clock reading when it is past what
	// the file holds (without reading the clock again), and Open resumes
	// from it: a clock that stepped back before the restart does not step
	// the store back, so no expired lease comes back to life.
	m.saved = max(m.saved, m.high)
	for _, mk := range m.marks {
		if mk.state == mClaimed {
			mk.leaseUntil = math.MinInt64
		}
	}
	m.open(rt)
	m.probeAll(rt)
}

// expire runs Expire at the raw clock: windows whose end lies Retention
// or more in the past go, and their marks with them.
func (m *storeModel) expire(rt *rapid.T) {
	st, err := m.db.Expire(context.Background())
	require.NoError(rt, err)
	// Expire reads the store's clock (and decides on the earlier of it and
	// the raw reading), so the store's time moves on to the raw reading.
	m.now()
	now := m.clock.Now().UnixNano()
	floor := m.floor
	dropped := 0
	// Oldest first, up to the first window to keep: one not past its
	// retention, or holding a lease that has not ended.
	live := slices.Sorted(maps.Keys(m.windows))
	for _, w := range live {
		if w < m.floor {
			continue
		}
		if now-(w+int64(modelSpan)) < int64(modelRetention) || now < m.leaseEnds[w] {
			break
		}
		floor = max(floor, w+int64(modelSpan))
	}
	if floor > m.floor {
		m.saved = m.now() // the expiry transaction reads the store's clock and saves it
		for w := range m.windows {
			if w < floor {
				delete(m.windows, w)
				dropped++
			}
		}
		m.floor = floor
		if m.newest < floor {
			m.newest = math.MinInt64
		}
		for k, mk := range m.marks {
			if mk.window < floor {
				delete(m.marks, k)
			}
		}
	}
	require.Equal(rt, dropped, st.Windows)
	m.probeAll(rt)
}

// probeAll asks the store about every key the model holds, with an effect
// that must not run for a DONE or FAILED key: a Bloom filter that lost a
// key after reopen or expiry would let it run.
func (m *storeModel) probeAll(rt *rapid.T) {
	for key, mk := range m.marks {
		if mk.state == mClaimed {
			continue // probing could take it over
		}
		var ran bool
		res, err := m.db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: key, Payload: []byte{mk.payload}},
			func(*oncekv.Tx) ([]byte, error) { ran = true; return nil, errNotApplied })
		require.False(rt, ran, "key %s lost its mark (a false negative?)", key)
		m.expectKnown(rt, mk, mk.payload, m.nowFor(mk, mk.payload), err, res.Duplicate, res.Response)
	}
}

// check runs after every step: effects committed exactly as often as the
// model says, and the registers hold what the model says.
func (m *storeModel) check(rt *rapid.T) {
	require.NoError(rt, m.db.View(func(tx *oncekv.Tx) error {
		for _, k := range modelKeys {
			var n uint64
			if b := tx.Bucket(accounts); b != nil {
				n = readUint(b.Get([]byte(k)))
			}
			require.Equal(rt, m.runs[k], n, "effect runs of %s", k)
		}
		for _, r := range []string{"a", "b"} {
			var val, f uint64
			if b := tx.Bucket([]byte("regs")); b != nil {
				val, f = readUint(b.Get([]byte(r))), b.Fence([]byte(r))
			}
			require.Equal(rt, m.regVal[r], val, "register %s", r)
			require.Equal(rt, m.regFence[r], f, "fence of %s", r)
		}
		return nil
	}))
}

// The Bloom filters as adversaries. A filter may only ever say "maybe"
// where it could say "no"; these hooks do so always, or on a coin toss.
// Correctness must not change: the filter is a hint that saves a B-tree
// read, never a source of truth. Each is built from the seed its test
// logs, so that a failure can be replayed.
var adversaries = map[string]func(seed uint64) func(bool) bool{
	"always-maybe":        func(uint64) func(bool) bool { return func(bool) bool { return true } },
	"half-false-positive": coinToss,
}

// coinToss answers "maybe" half of the time, from a generator seeded with
// seed. Many goroutines ask at once, so it takes turns.
func coinToss(seed uint64) func(bool) bool {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 0xc01))
	return func(bool) bool {
		mu.Lock()
		defer mu.Unlock()
		return rng.IntN(2) == 0
	}
}

// TestModelStateMachineWithAdversarialFilters runs TestModelStateMachine's
// model with each adversarial filter, a quarter of the plain test's checks
// each.
func TestModelStateMachineWithAdversarialFilters(t *testing.T) {
	for name, adversary := range adversaries {
		t.Run(name, func(t *testing.T) {
			withRapidChecks(t, modelChecks/4, func() {
				rapid.Check(t, func(rt *rapid.T) {
					// Drawn, so rapid's own seed replays the filter's answers.
					runModel(t, rt, adversary(rapid.Uint64().Draw(rt, "filter seed")))
				})
			})
		})
	}
}

// historyDurationEnv sets how long TestHistoryLinearizable runs (a Go
// duration, for example "60s" for a soak run). Each of the adversarial
// variants (TestHistoryLinearizableWithAdversarialFilters) runs for a
// quarter of it.
const historyDurationEnv = "ONCEKV_HISTORY_DURATION"

// historyDuration is the total time of the history tests: 30s for the
// plain run and 2 x 7.5s under the adversarial filters keeps all three
// inside CI's budget (about 45s of the root package's test time).
func historyDuration(t *testing.T, share float64) time.Duration {
	d := 30 * time.Second
	if testing.Short() {
		d = 2 * time.Second
	}
	if s := os.Getenv(historyDurationEnv); s != "" {
		var err error
		d, err = time.ParseDuration(s)
		require.NoError(t, err, "%s=%q", historyDurationEnv, s)
	}
	return time.Duration(float64(d) * share)
}

// TestHistoryLinearizable runs 16 goroutines against a few hot keys, with
// duplicates, key reuse, claims whose leases run out on an injected clock,
// takeovers, zombie completions and fenced writes, records every call with
// its invoke and return times, and checks the history with porcupine
// against a model of an idempotency map (per key: unseen, claimed under a
// lease and a token, done with a response, the effect's run count) plus
// fenced registers (value, fence, last issued token).
//
// The invariants the model enforces: an effect runs at most once per key;
// every duplicate gets the first response back; a live claim is never
// taken over and an expired one may be; a taken-over holder's Extend,
// Complete and Fail fail with ErrFenced and change nothing; tokens only
// grow; a fenced write lands only with a fence greater than the stored one;
// reads see the last write. Run it under -race.
func TestHistoryLinearizable(t *testing.T) {
	runHistory(t, historyDuration(t, 1), nil)
}

// histKeys and histRegs are the hot objects of one epoch: few, so that
// goroutines collide on them all the time.
const (
	histKeys    = 3
	histRegs    = 2
	histWorkers = 16
	// histOpsPerWorker bounds an epoch, so each partition of the history
	// stays a few hundred operations and porcupine checks it in
	// milliseconds. Fresh keys in every epoch keep the epochs independent.
	histOpsPerWorker = 40
)

// historySeedEnv replays the workload of a logged seed (as far as the
// goroutines' interleaving allows: each worker's choices, the adversarial
// filter's answers).
const historySeedEnv = "ONCEKV_HISTORY_SEED"

// histReach lists the outcomes ("kind/error", "+dup" for a duplicate
// Apply, "+done" for a Claim that found the key done) that every run must
// reach, so that the checked histories cover every case the model knows:
// duplicates, key reuse, conflicts with live claims, takeovers that fence
// a zombie's Extend, Complete and fenced write, stale fences. The rarest,
// a zombie's Complete fenced after a takeover, shows up about once in 60
// epochs (all were reached after 7 to 117 epochs in 12 runs).
var histReach = []string{
	"apply/ok", "apply/ok+dup", "apply/reuse", "apply/inprogress",
	"claim/ok", "claim/ok+done", "claim/reuse", "claim/inprogress",
	"extend/ok", "extend/fenced", "complete/ok", "complete/fenced", "fail/ok",
	"cput/ok", "cput/fenced", "nextfence/ok", "put/ok", "put/fenced", "read/ok",
}

// histMaxEpochs bounds a run that has not reached every case of histReach
// when its time is up: it goes on until it has, or fails after this many
// epochs. At one chance in 60 per epoch, missing a case for 2,000 epochs
// has odds of about e^-33: a failure means the workload lost a case.
const histMaxEpochs = 2000

// runHistory runs epochs of the concurrent workload for d, and on until
// every outcome of histReach has occurred, checking each epoch's history.
// adversary, when not nil, builds the hook that answers the Bloom filters
// from the run's seed.
//
// An epoch porcupine cannot decide within its time limit (Unknown, which
// says nothing about the store) is logged with the seed and left out; the
// test is skipped, naming the seed, if no epoch could be decided.
func runHistory(t *testing.T, d time.Duration, adversary func(seed uint64) func(bool) bool) {
	clock := oncetest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	path := filepath.Join(t.TempDir(), "history.db")
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true, Now: clock.Now, ExpireInterval: -1})
	require.NoError(t, err)
	defer func() {
		require.NoError(t, db.Close())
		oncetest.Check(t, path)
	}()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(historySeedEnv); s != "" {
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "%s=%q", historySeedEnv, s)
	}
	t.Logf("seed %d (set %s to replay it)", seed, historySeedEnv)
	if adversary != nil {
		oncekv.SetFilterHook(db, adversary(seed))
	}
	deadline := time.Now().Add(d)
	var epochs, ops, unknown int
	seen := map[string]int{} // outcomes of the checked epochs
	for epoch := 0; epoch == 0 || time.Now().Before(deadline) || len(unreached(seen)) > 0; epoch++ {
		require.Less(t, epoch, histMaxEpochs, "seed %d: after %d epochs the workload never reached %v; outcomes %v",
			seed, epoch, unreached(seen), seen)
		h := runEpoch(t, db, clock, epoch, seed)
		res, info := porcupine.CheckOperationsVerbose(historyModel, h, 30*time.Second)
		if res == porcupine.Unknown {
			unknown++
			t.Logf("seed %d epoch %d: porcupine could not decide within its time limit; epoch left out", seed, epoch)
			continue
		}
		if res != porcupine.Ok {
			file := filepath.Join(os.TempDir(), fmt.Sprintf("oncekv-history-%d.html", seed))
			if err := porcupine.VisualizePath(historyModel, info, file); err == nil {
				t.Logf("visualization in %s", file)
			}
			for _, op := range h {
				t.Log(historyModel.DescribeOperation(op.Input, op.Output))
			}
		}
		require.Equal(t, porcupine.Ok, res, "epoch %d (seed %d) is not linearizable", epoch, seed)
		epochs++
		ops += len(h)
		for _, op := range h {
			in, out := op.Input.(hIn), op.Output.(hOut)
			name := hKindNames[in.Kind] + "/" + histErrNames[out.Err]
			switch {
			case out.Dup:
				name += "+dup"
			case out.Done:
				name += "+done"
			}
			seen[name]++
		}
	}
	if epochs == 0 {
		t.Skipf("seed %d: porcupine decided none of %d epochs", seed, unknown)
	}
	t.Logf("%d epochs, %d operations checked: Ok (%d undecided epochs left out); outcomes %v", epochs, ops, unknown, seen)
}

// unreached returns the outcomes of histReach not in seen.
func unreached(seen map[string]int) []string {
	var missing []string
	for _, o := range histReach {
		if seen[o] == 0 {
			missing = append(missing, o)
		}
	}
	return missing
}

// hKind is an operation of the history.
type hKind uint8

const (
	hApply    hKind = iota // Apply(key, payload) with a counting effect
	hClaim                 // Claim(key, payload, lease)
	hExtend                // Claim.Extend(lease)
	hComplete              // Claim.Complete(response) with a counting effect
	hFail                  // Claim.Fail(transient error): release
	hCPut                  // PutFenced on the key's register with the claim's token
	hFence                 // NextFence(register)
	hPut                   // PutFenced(register, value, fence)
	hRead                  // read register value and fence
)

var hKindNames = [...]string{"apply", "claim", "extend", "complete", "fail", "cput", "nextfence", "put", "read"}

// hIn is an operation's input. T0 and T1 are the injected clock before
// the call and after it returned: the store read its time in between.
type hIn struct {
	Kind    hKind
	Obj     string // key or register, the partition
	Payload byte
	Lease   int64
	Token   uint64 // a claim's token, or a fence
	Value   uint64
	T0, T1  int64
}

// hErr classifies an error the model knows about.
type hErr uint8

const (
	eNone hErr = iota
	eReuse
	eInProgress
	eFenced
	eOther
)

var histErrNames = [...]string{"ok", "reuse", "inprogress", "fenced", "other"}

// hOut is an operation's output.
type hOut struct {
	Err   hErr
	Dup   bool
	Done  bool   // Claim found the key done
	Resp  string // response or stored response
	Token uint64 // Claim's token, NextFence's token
	Value uint64 // register value read, or effect count after Complete
	Fence uint64 // register fence read
	Msg   string // the error's text, for the report
}

func classify(err error) hErr {
	switch {
	case err == nil:
		return eNone
	case errors.Is(err, oncekv.ErrKeyReuse):
		return eReuse
	case errors.Is(err, oncekv.ErrInProgress):
		return eInProgress
	case errors.Is(err, oncekv.ErrFenced):
		return eFenced
	}
	return eOther
}

// keyState is the model of one key (and its fenced register) or one
// register; both are plain comparable values.
type keyState struct {
	Phase     uint8 // 0 unseen, 1 claimed, 2 done
	Payload   byte
	Token     uint64 // the current claim's token
	LastToken uint64 // greatest claim token seen for the key
	DLo, DHi  int64  // lease deadline lies in [DLo, DHi]
	Released  bool
	Resp      string
	Runs      uint64 // how many times an effect committed
	RegVal    uint64
	RegFence  uint64
	Issued    uint64 // registers: last NextFence token
}

const (
	phaseUnseen  = 0
	phaseClaimed = 1
	phaseDone    = 2
)

// mayBeExpired and mayBeLive: the store read its clock somewhere in
// [t0, t1], and the deadline lies somewhere in [DLo, DHi].
func (s keyState) mayBeExpired(in hIn) bool { return s.Released || in.T1 >= s.DLo }
func (s keyState) mayBeLive(in hIn) bool    { return !s.Released && in.T0 < s.DHi }

func stepKey(s keyState, in hIn, out hOut) (bool, keyState) {
	claimedBy := func(tok uint64) bool { return s.Phase == phaseClaimed && s.Token == tok && !s.Released }
	switch in.Kind {
	case hApply, hClaim:
		switch out.Err {
		case eReuse:
			return s.Phase != phaseUnseen && s.Payload != in.Payload, s
		case eInProgress:
			return s.Phase == phaseClaimed && s.Payload == in.Payload && s.mayBeLive(in), s
		case eNone:
		default:
			return false, s
		}
		if s.Phase == phaseDone {
			dup := out.Dup || out.Done
			return dup && s.Payload == in.Payload && out.Resp == s.Resp, s
		}
		free := s.Phase == phaseUnseen || (s.Payload == in.Payload && s.mayBeExpired(in))
		if !free || out.Dup || out.Done {
			return false, s
		}
		s.Payload, s.Released = in.Payload, false
		if in.Kind == hApply {
			if out.Resp != strconv.FormatUint(s.Runs+1, 10) {
				return false, s // the effect ran more than once
			}
			s.Phase, s.Resp, s.Runs = phaseDone, out.Resp, s.Runs+1
			return true, s
		}
		if out.Token <= s.LastToken {
			return false, s
		}
		s.Phase, s.Token, s.LastToken = phaseClaimed, out.Token, out.Token
		s.DLo, s.DHi = in.T0+in.Lease, in.T1+in.Lease
		return true, s
	case hExtend:
		if out.Err == eFenced {
			return !claimedBy(in.Token), s
		}
		if out.Err != eNone || !claimedBy(in.Token) {
			return false, s
		}
		s.DLo, s.DHi = in.T0+in.Lease, in.T1+in.Lease
		return true, s
	case hComplete:
		if out.Err == eFenced {
			return !claimedBy(in.Token), s
		}
		if out.Err != eNone || !claimedBy(in.Token) || out.Value != s.Runs+1 {
			return false, s
		}
		s.Phase, s.Resp, s.Runs = phaseDone, out.Resp, s.Runs+1
		return true, s
	case hFail:
		if out.Err == eFenced {
			return !claimedBy(in.Token), s
		}
		if out.Err != eNone || !claimedBy(in.Token) {
			return false, s
		}
		s.Released = true
		return true, s
	case hCPut, hPut:
		if out.Err == eFenced {
			return in.Token <= s.RegFence, s
		}
		if out.Err != eNone || in.Token <= s.RegFence {
			return false, s
		}
		s.RegVal, s.RegFence = in.Value, in.Token
		return true, s
	case hFence:
		if out.Err != eNone || out.Token != s.Issued+1 {
			return false, s
		}
		s.Issued = out.Token
		return true, s
	case hRead:
		return out.Err == eNone && out.Value == s.RegVal && out.Fence == s.RegFence, s
	}
	return false, s
}

var historyModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range h {
			obj := op.Input.(hIn).Obj
			if _, ok := by[obj]; !ok {
				order = append(order, obj)
			}
			by[obj] = append(by[obj], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, obj := range order {
			out = append(out, by[obj])
		}
		return out
	},
	Init: func() any { return keyState{} },
	Step: func(state, input, output any) (bool, any) {
		return stepKey(state.(keyState), input.(hIn), output.(hOut))
	},
	Equal: func(a, b any) bool { return a == b },
	DescribeOperation: func(input, output any) string {
		in, out := input.(hIn), output.(hOut)
		return fmt.Sprintf("%s %s p=%d lease=%d tok=%d val=%d t=[%d,%d] -> %+v",
			hKindNames[in.Kind], in.Obj, in.Payload, in.Lease, in.Token, in.Value, in.T0, in.T1, out)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%+v", state.(keyState)) },
}

var (
	histCounts = []byte("hist-counts")
	histRegsB  = []byte("hist-regs")
)

// histWorker is one goroutine's view of an epoch.
type histWorker struct {
	db     *oncekv.DB
	clock  *oncetest.Clock
	epoch  int
	rng    *rand.Rand
	start  time.Time
	id     int
	ops    []porcupine.Operation
	fences map[string]uint64 // tokens taken and not used yet: stale by the time they are
	// unexpected lists errors the model has no place for; the test fails
	// on them after the epoch (require cannot stop a test from a goroutine).
	unexpected []string
}

// record runs call and appends it to the history.
func (w *histWorker) record(in hIn, call func(in *hIn) hOut) hOut {
	in.T0 = w.clock.Now().UnixNano()
	began := time.Since(w.start).Nanoseconds()
	out := call(&in)
	ended := time.Since(w.start).Nanoseconds()
	in.T1 = w.clock.Now().UnixNano()
	if out.Err == eOther {
		w.unexpected = append(w.unexpected, fmt.Sprintf("%s %s: %s", hKindNames[in.Kind], in.Obj, out.Msg))
	}
	w.ops = append(w.ops, porcupine.Operation{ClientId: w.id, Input: in, Call: began, Output: out, Return: ended})
	return out
}

func (w *histWorker) key() string { return fmt.Sprintf("e%d/k%d", w.epoch, w.rng.IntN(histKeys)) }
func (w *histWorker) reg() string { return fmt.Sprintf("e%d/r%d", w.epoch, w.rng.IntN(histRegs)) }

// countEffect is the counting, non-idempotent effect: it bumps the key's
// run count and returns it.
func countEffect(key string, runs *uint64) func(tx *oncekv.Tx) error {
	return func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(histCounts)
		if err != nil {
			return err
		}
		n := readUint(b.Get([]byte(key))) + 1
		*runs = n
		return b.Put([]byte(key), uintBytes(n))
	}
}

func withOut(err error) hOut { return hOut{Err: classify(err), Msg: fmt.Sprint(err)} }

func (w *histWorker) apply(ctx context.Context) {
	in := hIn{Kind: hApply, Obj: w.key()}
	if w.rng.IntN(20) == 0 {
		in.Payload = 1 // a reused key
	}
	w.record(in, func(in *hIn) hOut {
		var runs uint64
		count := countEffect(in.Obj, &runs)
		res, err := w.db.Apply(ctx, oncekv.Request{Handler: "h", Key: in.Obj, Payload: []byte{in.Payload}},
			func(tx *oncekv.Tx) ([]byte, error) {
				if err := count(tx); err != nil {
					return nil, err
				}
				return strconv.AppendUint(nil, runs, 10), nil
			})
		out := withOut(err)
		out.Dup, out.Resp = res.Duplicate, string(res.Response)
		return out
	})
}

// claimFlow claims a key and, while it holds it, may write the key's
// fenced register, extend, stall while the clock runs (becoming a zombie
// when another worker takes over), then completes or releases it.
func (w *histWorker) claimFlow(ctx context.Context) {
	var c *oncekv.Claim
	key := w.key()
	lease := time.Duration(1+w.rng.IntN(3)) * time.Second
	out := w.record(hIn{Kind: hClaim, Obj: key, Lease: int64(lease)}, func(in *hIn) hOut {
		var err error
		c, err = w.db.Claim(ctx, oncekv.Request{Handler: "h", Key: in.Obj, Payload: []byte{0}}, lease)
		o := withOut(err)
		if err == nil {
			o.Token, o.Done = c.Token(), c.Done()
			if o.Done {
				o.Resp = string(c.Result().Response)
			}
		}
		return o
	})
	if out.Err != eNone || out.Done {
		return
	}
	tok := out.Token
	for steps := w.rng.IntN(4); steps > 0; steps-- {
		var o hOut
		switch w.rng.IntN(4) {
		case 0:
			w.clock.Advance(time.Duration(w.rng.IntN(1500)) * time.Millisecond) // a stall
			continue
		case 1:
			o = w.record(hIn{Kind: hCPut, Obj: key, Token: tok, Value: w.rng.Uint64N(1000)}, func(in *hIn) hOut {
				return withOut(w.db.Update(func(tx *oncekv.Tx) error {
					b, err := tx.CreateBucketIfNotExists(histRegsB)
					if err != nil {
						return err
					}
					return b.PutFenced([]byte(in.Obj), uintBytes(in.Value), in.Token)
				}))
			})
		default:
			ext := time.Duration(1+w.rng.IntN(2)) * time.Second
			o = w.record(hIn{Kind: hExtend, Obj: key, Token: tok, Lease: int64(ext)}, func(in *hIn) hOut {
				return withOut(c.Extend(ctx, ext))
			})
		}
		if o.Err == eFenced && w.rng.IntN(2) == 0 {
			return // a well-behaved zombie gives up; the other half keeps trying
		}
	}
	if w.rng.IntN(4) == 0 {
		w.record(hIn{Kind: hFail, Obj: key, Token: tok}, func(in *hIn) hOut {
			return withOut(c.Fail(ctx, errors.New("upstream 503")))
		})
		return
	}
	w.record(hIn{Kind: hComplete, Obj: key, Token: tok}, func(in *hIn) hOut {
		var runs uint64
		resp := []byte("tok" + strconv.FormatUint(in.Token, 10))
		_, err := c.Complete(ctx, resp, countEffect(in.Obj, &runs))
		o := withOut(err)
		if err == nil {
			o.Resp, o.Value = string(resp), runs
		}
		return o
	})
}

// fenceFlow takes a fencing token for a register and writes with it, or
// with a token it took earlier and that a newer writer may have beaten.
func (w *histWorker) fenceFlow() {
	reg := w.reg()
	out := w.record(hIn{Kind: hFence, Obj: reg}, func(in *hIn) hOut {
		tok, err := w.db.NextFence(in.Obj)
		o := withOut(err)
		o.Token = tok
		return o
	})
	if out.Err != eNone {
		return
	}
	f := out.Token
	if old, ok := w.fences[reg]; ok && w.rng.IntN(2) == 0 {
		f = old // a writer that stalled after taking its token
	}
	w.fences[reg] = out.Token
	w.record(hIn{Kind: hPut, Obj: reg, Token: f, Value: w.rng.Uint64N(1000)}, func(in *hIn) hOut {
		return withOut(w.db.Update(func(tx *oncekv.Tx) error {
			b, err := tx.CreateBucketIfNotExists(histRegsB)
			if err != nil {
				return err
			}
			return b.PutFenced([]byte(in.Obj), uintBytes(in.Value), in.Token)
		}))
	})
}

func (w *histWorker) read() {
	w.record(hIn{Kind: hRead, Obj: w.reg()}, func(in *hIn) hOut {
		var o hOut
		err := w.db.View(func(tx *oncekv.Tx) error {
			if b := tx.Bucket(histRegsB); b != nil {
				o.Value, o.Fence = readUint(b.Get([]byte(in.Obj))), b.Fence([]byte(in.Obj))
			}
			return nil
		})
		o.Err, o.Msg = classify(err), fmt.Sprint(err)
		return o
	})
}

// runEpoch runs histWorkers goroutines for one epoch on fresh keys and
// returns their merged history.
func runEpoch(t *testing.T, db *oncekv.DB, clock *oncetest.Clock, epoch int, seed uint64) []porcupine.Operation {
	ctx := context.Background()
	start := time.Now()
	workers := make([]*histWorker, histWorkers)
	var wg sync.WaitGroup
	for i := range workers {
		w := &histWorker{db: db, clock: clock, epoch: epoch, id: i, start: start,
			rng: rand.New(rand.NewPCG(seed, uint64(epoch*histWorkers+i))), fences: map[string]uint64{}}
		workers[i] = w
		wg.Go(func() {
			for range histOpsPerWorker {
				switch r := w.rng.IntN(100); {
				case r < 10:
					w.clock.Advance(time.Duration(w.rng.IntN(800)) * time.Millisecond)
				case r < 45:
					w.apply(ctx)
				case r < 70:
					w.claimFlow(ctx)
				case r < 90:
					w.fenceFlow()
				default:
					w.read()
				}
			}
		})
	}
	wg.Wait()
	var h []porcupine.Operation
	for _, w := range workers {
		require.Empty(t, w.unexpected, "worker %d", w.id)
		h = append(h, w.ops...)
	}
	return h
}

// TestHistoryLinearizableWithAdversarialFilters runs TestHistoryLinearizable
// with each adversarial filter, each for a quarter of its duration.
func TestHistoryLinearizableWithAdversarialFilters(t *testing.T) {
	for name, adversary := range adversaries {
		t.Run(name, func(t *testing.T) { runHistory(t, historyDuration(t, 0.25), adversary) })
	}
}
