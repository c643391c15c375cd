package conformance

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

var bg = context.Background()

func req(key string) oncekv.Request {
	return oncekv.Request{Handler: "orders", Key: key, Payload: []byte("payload of " + key)}
}

// inc is an effect adding one to counter and answering resp.
func inc(counter, resp string) *Effect {
	return &Effect{Counter: counter, Response: []byte(resp)}
}

func (e *env) count(counter string) int {
	e.t.Helper()
	n, err := e.s.Count(bg, counter)
	require.NoError(e.t, err)
	return n
}

// requireRequestError checks that err names req's handler and key.
func requireRequestError(t *testing.T, err error, r oncekv.Request) {
	t.Helper()
	var re *oncekv.RequestError
	require.ErrorAs(t, err, &re)
	require.Equal(t, r.Handler, re.Handler)
	require.Equal(t, r.Key, re.Key)
}

// testApplyOnce: the first delivery runs the effect and commits its
// response; every later one, also after a reopen, gets the same bytes back
// with Duplicate set and FirstSeen of the first, without running it.
func testApplyOnce(t *testing.T, e *env) {
	r := req("o-1")
	res, err := e.s.Apply(bg, r, inc("c", "receipt 1"))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, "receipt 1", string(res.Response))
	require.True(t, res.FirstSeen.Equal(start), "FirstSeen %v, want the store's clock %v", res.FirstSeen, start)
	require.True(t, e.s.Now().Equal(start), "Now is the injected clock")
	require.Equal(t, 1, e.count("c"))
	for round := range 2 {
		e.clk.Advance(time42)
		res, err := e.s.Apply(bg, r, inc("c", "receipt 2"))
		require.NoError(t, err, "round %d", round)
		require.True(t, res.Duplicate)
		require.Equal(t, "receipt 1", string(res.Response))
		require.True(t, res.FirstSeen.Equal(start))
		require.Equal(t, 1, e.count("c"), "a duplicate runs no effect")
		require.Equal(t, oncekv.Ack, oncekv.Classify(err).Action)
		e.reopen()
	}
}

const time42 = 42 * 1e9 // 42s

// testNilAndEmpty: a nil response and an empty one are replayed as they
// were.
func testNilAndEmpty(t *testing.T, e *env) {
	_, err := e.s.Apply(bg, req("nil"), &Effect{Counter: "c"})
	require.NoError(t, err)
	_, err = e.s.Apply(bg, req("empty"), &Effect{Counter: "c", Response: []byte{}})
	require.NoError(t, err)
	for range 2 {
		res, err := e.s.Apply(bg, req("nil"), inc("c", "x"))
		require.NoError(t, err)
		require.True(t, res.Duplicate)
		require.Nil(t, res.Response)
		res, err = e.s.Apply(bg, req("empty"), inc("c", "x"))
		require.NoError(t, err)
		require.NotNil(t, res.Response)
		require.Empty(t, res.Response)
		e.reopen()
	}
	require.Equal(t, 2, e.count("c"))
}

// testHandlerScopesKey: dedup is per (handler, key).
func testHandlerScopesKey(t *testing.T, e *env) {
	for _, h := range []string{"billing", "shipping", "billin", "gshipping"} {
		res, err := e.s.Apply(bg, oncekv.Request{Handler: h, Key: "evt-1"}, inc("c", h))
		require.NoError(t, err)
		require.False(t, res.Duplicate, h)
	}
	res, err := e.s.Apply(bg, oncekv.Request{Handler: "billing", Key: "evt-1"}, inc("c", "again"))
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, "billing", string(res.Response))
	require.Equal(t, 4, e.count("c"))
}

// testKeyReuse: another payload under the key is refused and changes
// nothing.
func testKeyReuse(t *testing.T, e *env) {
	r := req("o-1")
	_, err := e.s.Apply(bg, r, inc("c", "first"))
	require.NoError(t, err)
	other := r
	other.Payload = []byte("another payload")
	_, err = e.s.Apply(bg, other, inc("c", "second"))
	require.ErrorIs(t, err, oncekv.ErrKeyReuse)
	requireRequestError(t, err, other)
	require.Equal(t, oncekv.GiveUp, oncekv.Classify(err).Action)
	require.Equal(t, 1, e.count("c"))
	res, err := e.s.Apply(bg, r, inc("c", "third"))
	require.NoError(t, err)
	require.Equal(t, "first", string(res.Response))
}

// testFingerprint: a Fingerprint identifies the content instead of the
// payload's bytes.
func testFingerprint(t *testing.T, e *env) {
	r := oncekv.Request{Handler: "h", Key: "k", Payload: []byte(`{"a":1,"b":2}`), Fingerprint: []byte("v1:a=1,b=2")}
	_, err := e.s.Apply(bg, r, inc("c", "ok"))
	require.NoError(t, err)
	same := r
	same.Payload = []byte(`{"b":2,"a":1}`)
	res, err := e.s.Apply(bg, same, inc("c", "no"))
	require.NoError(t, err)
	require.True(t, res.Duplicate, "same fingerprint, other bytes: a duplicate")
	other := r
	other.Fingerprint = []byte("v1:a=1,b=3")
	_, err = e.s.Apply(bg, other, inc("c", "no"))
	require.ErrorIs(t, err, oncekv.ErrKeyReuse)
	bare := r
	bare.Fingerprint = nil
	_, err = e.s.Apply(bg, bare, inc("c", "no"))
	require.ErrorIs(t, err, oncekv.ErrKeyReuse, "a payload's hash never equals a fingerprint's")
	long := oncekv.Request{Handler: "h", Key: "long", Fingerprint: make([]byte, oncekv.MaxFingerprintSize+1)}
	_, err = e.s.Apply(bg, long, inc("c", "no"))
	require.ErrorIs(t, err, oncekv.ErrInvalidFingerprint)
	require.Contains(t, err.Error(), "65 bytes")
	long.Fingerprint = long.Fingerprint[:oncekv.MaxFingerprintSize]
	res, err = e.s.Apply(bg, long, inc("c", "max"))
	require.NoError(t, err)
	require.False(t, res.Duplicate, "the refused request wrote nothing")
	require.Equal(t, 2, e.count("c"))
}

// testEffectError: an effect's error rolls everything back, records
// nothing, and a retry runs it again.
func testEffectError(t *testing.T, e *env) {
	boom := errors.New("upstream timeout")
	r := req("o-1")
	_, err := e.s.Apply(bg, r, &Effect{Counter: "c", Err: boom})
	require.ErrorIs(t, err, boom)
	requireRequestError(t, err, r)
	require.Equal(t, oncekv.RetryLater, oncekv.Classify(err).Action)
	require.Equal(t, 0, e.count("c"), "the effect's writes rolled back")
	res, err := e.s.Apply(bg, r, inc("c", "ok"))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, 1, e.count("c"))
}

// testPermanent: a permanent error rolls the effect back, records FAILED,
// and replays the failure to every duplicate, also after a reopen.
func testPermanent(t *testing.T, e *env) {
	bad := errors.New("card declined")
	r := req("o-1")
	_, err := e.s.Apply(bg, r, &Effect{Counter: "c", Err: oncekv.Permanent(bad)})
	require.ErrorIs(t, err, oncekv.ErrFailed)
	require.ErrorIs(t, err, bad, "the call that failed keeps its cause")
	var fe *oncekv.FailedError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "card declined", fe.Message)
	require.Equal(t, 0, e.count("c"))
	for range 2 {
		res, err := e.s.Apply(bg, r, inc("c", "no"))
		require.ErrorIs(t, err, oncekv.ErrFailed)
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "card declined", fe.Message)
		require.True(t, res.Duplicate)
		require.Equal(t, oncekv.GiveUp, oncekv.Classify(err).Action)
		require.Equal(t, 0, e.count("c"), "a recorded failure runs no effect")
		e.reopen()
	}
}

// testContextBefore: a context done before Apply applies nothing.
func testContextBefore(t *testing.T, e *env) {
	ctx, cancel := context.WithCancel(bg)
	cancel()
	ran := false
	_, err := e.s.Apply(ctx, req("o-1"), &Effect{Counter: "c", Hook: func() { ran = true }})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, oncekv.RetryNow, oncekv.Classify(err).Action)
	require.False(t, ran)
	res, err := e.s.Apply(bg, req("o-1"), inc("c", "ok"))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
}

// testContextDuring: a context that ends while the effect runs applies
// nothing, whatever the effect returns.
func testContextDuring(t *testing.T, e *env) {
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	_, err := e.s.Apply(ctx, req("o-1"), &Effect{Counter: "c", Hook: cancel})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 0, e.count("c"))
	res, err := e.s.Apply(bg, req("o-1"), inc("c", "ok"))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, 1, e.count("c"))
}

// testBadInput: every bad request gets its typed error, naming what was
// wrong, and writes nothing.
func testBadInput(t *testing.T, e *env) {
	ran := false
	eff := &Effect{Counter: "c", Hook: func() { ran = true }}
	for _, tc := range []struct {
		r    oncekv.Request
		want error
		says string
	}{
		{oncekv.Request{Key: "k"}, oncekv.ErrHandlerRequired, "handler"},
		{oncekv.Request{Handler: "h"}, oncekv.ErrKeyRequired, "key"},
		{oncekv.Request{Handler: "h", Key: strings.Repeat("k", 32767)}, oncekv.ErrKeyTooLarge, "32768"},
	} {
		_, err := e.s.Apply(bg, tc.r, eff)
		require.ErrorIs(t, err, tc.want)
		require.Contains(t, err.Error(), tc.says)
		require.Equal(t, oncekv.GiveUp, oncekv.Classify(err).Action)
		_, err = e.s.Claim(bg, tc.r, time42)
		require.ErrorIs(t, err, tc.want)
		rs, err := e.s.ApplyBatch(bg, []oncekv.Request{tc.r}, func(int) *Effect { return eff })
		require.NoError(t, err)
		require.ErrorIs(t, rs[0].Err, tc.want)
	}
	require.False(t, ran)
	require.Equal(t, 0, e.count("c"))
	// The longest key that fits works.
	res, err := e.s.Apply(bg, oncekv.Request{Handler: "h", Key: strings.Repeat("k", 32766-1)}, inc("c", "ok"))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	res, err = e.s.Apply(bg, oncekv.Request{Handler: "h", Key: strings.Repeat("k", 32766-1)}, inc("c", "ok"))
	require.NoError(t, err)
	require.True(t, res.Duplicate)
}

// testResponseTooLarge: a response over the limit fails its request and
// records nothing.
func testResponseTooLarge(t *testing.T, e *env) {
	e.h.LimitResponse(e.s, 100)
	_, err := e.s.Apply(bg, req("o-1"), &Effect{Counter: "c", Response: make([]byte, 101)})
	require.ErrorIs(t, err, oncekv.ErrResponseTooLarge)
	require.Contains(t, err.Error(), "101")
	require.Equal(t, 0, e.count("c"))
	res, err := e.s.Apply(bg, req("o-1"), &Effect{Counter: "c", Response: make([]byte, 100)})
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, 1, e.count("c"))
}

// testNilEffect: a nil effect records the mark only.
func testNilEffect(t *testing.T, e *env) {
	res, err := e.s.Apply(bg, req("o-1"), nil)
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Nil(t, res.Response)
	res, err = e.s.Apply(bg, req("o-1"), inc("c", "x"))
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, 0, e.count("c"))
}

// testConcurrentSameKey: deliveries of one key at once apply it once.
// The embedded store answers each from the mark once the effect
// committed; the PostgreSQL store may refuse a delivery that arrived
// while the effect ran with ErrInProgress (see the differences).
func testConcurrentSameKey(t *testing.T, e *env) {
	const n = 8
	var wg sync.WaitGroup
	applied, dups, busy := make(chan int, n), make(chan int, n), make(chan error, n)
	release := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release
			res, err := e.s.Apply(bg, req("hot"), &Effect{Counter: "c", Response: []byte("r")})
			switch {
			case err != nil:
				busy <- err
			case res.Duplicate:
				dups <- i
			default:
				applied <- i
			}
		}()
	}
	close(release)
	wg.Wait()
	close(busy)
	for err := range busy {
		require.Equal(t, Shared, e.h.Kind, "only a shared store refuses a key in progress: %v", err)
		require.ErrorIs(t, err, oncekv.ErrInProgress)
		require.Equal(t, oncekv.RetryLater, oncekv.Classify(err).Action)
	}
	require.Len(t, applied, 1)
	require.Equal(t, 1, e.count("c"))
	res, err := e.s.Apply(bg, req("hot"), inc("c", "x"))
	require.NoError(t, err)
	require.True(t, res.Duplicate)
}

// testConcurrentDistinct: many keys at once, each applied once.
func testConcurrentDistinct(t *testing.T, e *env) {
	const workers, keys = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*keys*2)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				key := string(rune('a'+w)) + "-" + string(rune('a'+k))
				for range 2 {
					if _, err := e.s.Apply(bg, req(key), inc("c", key)); err != nil {
						errs <- err
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, workers*keys, e.count("c"))
}

// testClosed: a closed store refuses everything with ErrClosed.
func testClosed(t *testing.T, e *env) {
	require.NoError(t, e.s.Close())
	_, err := e.s.Apply(bg, req("o-1"), inc("c", "x"))
	require.ErrorIs(t, err, oncekv.ErrClosed)
	require.Equal(t, oncekv.Reopen, oncekv.Classify(err).Action)
	_, err = e.s.Claim(bg, req("o-1"), time42)
	require.ErrorIs(t, err, oncekv.ErrClosed)
	_, err = e.s.NextFence(bg, "r")
	require.ErrorIs(t, err, oncekv.ErrClosed)
	_, err = e.s.Expire(bg)
	require.ErrorIs(t, err, oncekv.ErrClosed)
	require.NoError(t, e.s.Close(), "closing twice is fine")
}
