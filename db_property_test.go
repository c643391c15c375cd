package oncekv_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

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

// nowFor is now for an Apply or Claim of a key whose live mark is mk: a
// final mark (DONE or FAILED) answers it without the store reading its
// clock, since the answer does not depend on the time; a claim's lease, or
// a write for a key without a mark, does.
func (m *storeModel) nowFor(mk *mMark) int64 {
	if mk != nil && mk.state != mClaimed {
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
	now := m.nowFor(mk)
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
	now := m.nowFor(mk)
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
		m.expectKnown(rt, mk, mk.payload, m.nowFor(mk), err, res.Duplicate, res.Response)
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
