package otel_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"

	"github.com/oncekv/oncekv"
	oncekvotel "github.com/oncekv/oncekv/otel"
)

func TestApplyAndItsDuplicateJoinTheKeysTrace(t *testing.T) {
	r := newRig(t, nil)
	s := openStore(t)
	db := r.tel.DB(s.db)
	key := keyLike(3)
	req := oncekv.Request{Handler: "deposit", Key: key, Payload: []byte("10")}
	ctx := context.Background()

	res, err := db.Apply(ctx, req, put("acct", "10"))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	s.clock.Advance(90 * time.Second)
	res, err = db.Apply(ctx, req, put("acct", "20"))
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, "ok 10", string(res.Response), "the wrapper hands back Apply's result untouched")

	spans := r.ended("oncekv.apply")
	require.Len(t, spans, 2)
	first, dup := spans[0], spans[1]
	for _, sp := range spans {
		require.Equal(t, r.tel.TraceID(key), sp.SpanContext().TraceID(), "every delivery of the key is in the key's trace")
		require.Equal(t, r.tel.KeyHash(key), str(sp, oncekvotel.AttrKeyHash))
		require.Equal(t, r.tel.TraceID(key).String(), r.tel.KeyHash(key))
		require.Equal(t, "deposit", str(sp, oncekvotel.AttrHandler))
		require.Equal(t, "ack", str(sp, oncekvotel.AttrAction))
		require.True(t, sp.Parent().IsRemote(), "the parent is the key's placeholder")
		require.Equal(t, codes.Unset, sp.Status().Code, "a duplicate is no error")
	}
	require.Equal(t, spans[0].Parent().SpanID(), spans[1].Parent().SpanID(), "one placeholder parent for the key")
	require.Equal(t, "applied", str(first, oncekvotel.AttrOutcome))
	require.False(t, attrs(first)[oncekvotel.AttrDuplicate].AsBool())
	require.Equal(t, int64(1), attrs(first)[oncekvotel.AttrEffectRuns].AsInt64())
	require.Equal(t, "duplicate", str(dup, oncekvotel.AttrOutcome))
	require.True(t, attrs(dup)[oncekvotel.AttrDuplicate].AsBool())
	require.Equal(t, int64(0), attrs(dup)[oncekvotel.AttrEffectRuns].AsInt64())
	require.Equal(t, 90.0, attrs(dup)[oncekvotel.AttrMarkAge].AsFloat64(), "the mark's age by the store's clock")
	requireNoKey(t, r, key)
}

func TestApplyErrorsHaveTheirOutcomeAndNoKey(t *testing.T) {
	r := newRig(t, nil)
	s := openStore(t)
	db := r.tel.DB(s.db)
	ctx := context.Background()
	key := keyLike(4)

	_, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: key, Payload: []byte("a")}, put("k", "a"))
	require.NoError(t, err)
	_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: key, Payload: []byte("b")}, put("k", "b"))
	require.ErrorIs(t, err, oncekv.ErrKeyReuse)

	perm := keyLike(5)
	_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: perm}, func(*oncekv.Tx) ([]byte, error) {
		return nil, oncekv.Permanent(errors.New("card declined for " + perm))
	})
	require.ErrorIs(t, err, oncekv.ErrFailed)
	_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: perm}, put("k", "c"))
	require.ErrorIs(t, err, oncekv.ErrFailed)

	transient := keyLike(6)
	_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: transient}, func(*oncekv.Tx) ([]byte, error) {
		return nil, errors.New("upstream timeout")
	})
	require.Error(t, err)

	_, err = db.Apply(ctx, oncekv.Request{Handler: "", Key: "k"}, put("k", "d"))
	require.ErrorIs(t, err, oncekv.ErrHandlerRequired)

	held := keyLike(7)
	c, err := db.DB.Claim(ctx, oncekv.Request{Handler: "h", Key: held}, time.Minute)
	require.NoError(t, err)
	_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: held}, put("k", "e"))
	require.ErrorIs(t, err, oncekv.ErrInProgress)
	require.NoError(t, c.Fail(ctx, nil))

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = db.Apply(cancelled, oncekv.Request{Handler: "h", Key: keyLike(8)}, put("k", "f"))
	require.ErrorIs(t, err, context.Canceled)

	spans := r.ended("oncekv.apply")
	want := []struct {
		outcome, action string
		dup             bool
		code            codes.Code
	}{
		{"applied", "ack", false, codes.Unset},
		{"key_reuse", "give_up", false, codes.Error},
		{"failed", "give_up", false, codes.Error},
		{"failed", "give_up", true, codes.Error}, // the recorded failure, replayed
		{"error", "retry_later", false, codes.Error},
		{"invalid", "give_up", false, codes.Error},
		{"in_progress", "retry_later", false, codes.Unset},
		{"aborted", "retry_now", false, codes.Error},
	}
	require.Len(t, spans, len(want))
	for i, w := range want {
		sp := spans[i]
		require.Equal(t, w.outcome, str(sp, oncekvotel.AttrOutcome), "span %d", i)
		require.Equal(t, w.action, str(sp, oncekvotel.AttrAction), "span %d", i)
		require.Equal(t, w.dup, attrs(sp)[oncekvotel.AttrDuplicate].AsBool(), "span %d", i)
		require.Equal(t, w.code, sp.Status().Code, "span %d", i)
		if w.code == codes.Error {
			require.True(t, hasEvent(sp, "exception"), "span %d", i)
		}
	}
	require.Contains(t, spans[2].Status().Description, "card declined for key#"+r.tel.KeyHash(perm),
		"the key in an error message is replaced by its hash")
	for _, k := range []string{key, perm, transient, held} {
		requireNoKey(t, r, k)
	}
}

func TestApplyRecordsTheKeyOnlyWhenAllowed(t *testing.T) {
	r := newRig(t, &oncekvotel.Options{RecordKeys: true})
	s := openStore(t)
	key := keyLike(3)
	_, err := r.tel.DB(s.db).Apply(context.Background(), oncekv.Request{Handler: "h", Key: key}, func(*oncekv.Tx) ([]byte, error) {
		return nil, errors.New("no luck with " + key)
	})
	require.Error(t, err)
	sp := r.one(t, "oncekv.apply")
	require.Equal(t, key, str(sp, oncekvotel.AttrKey))
	require.Equal(t, r.tel.KeyHash(key), str(sp, oncekvotel.AttrKeyHash), "the hash is there too, to query by either")
	require.Contains(t, sp.Status().Description, "no luck with "+key)

	long := keyLike(oncekvotel.MaxKeyAttribute)
	_, err = r.tel.DB(s.db).Apply(context.Background(), oncekv.Request{Handler: "h", Key: long}, nil)
	require.NoError(t, err)
	spans := r.ended("oncekv.apply")
	_, has := attrs(spans[1])[oncekvotel.AttrKey]
	require.False(t, has, "a key over MaxKeyAttribute is recorded by its hash only")
}

func TestApplyInACallersTraceStaysThereLinkedToTheKeys(t *testing.T) {
	r := newRig(t, nil)
	s := openStore(t)
	key := keyLike(3)
	pctx, parent := r.tracer().Start(context.Background(), "caller")
	_, err := r.tel.DB(s.db).Apply(pctx, oncekv.Request{Handler: "h", Key: key}, nil)
	require.NoError(t, err)
	parent.End()

	sp := r.one(t, "oncekv.apply")
	require.Equal(t, parent.SpanContext().TraceID(), sp.SpanContext().TraceID(), "the caller's trace stays whole")
	require.Equal(t, parent.SpanContext().SpanID(), sp.Parent().SpanID())
	require.Len(t, sp.Links(), 1)
	require.Equal(t, r.tel.TraceID(key), sp.Links()[0].SpanContext.TraceID(), "linked to the key's trace")
}

func TestApplyBatchCountsTheEffectsRunsAgain(t *testing.T) {
	r := newRig(t, nil)
	s := openStore(t)
	reqs := []oncekv.Request{{Handler: "h", Key: "k1"}, {Handler: "h", Key: "k2"}, {Handler: "h", Key: "k3"}}
	results, err := r.tel.DB(s.db).ApplyBatch(context.Background(), reqs, func(tx *oncekv.Tx, i int) ([]byte, error) {
		if i == 1 {
			return nil, errors.New("transient")
		}
		return put(reqs[i].Key, "v")(tx)
	})
	require.NoError(t, err)
	require.Error(t, results[1].Err)
	// k1 runs, k2 fails (rolling the transaction back), k1 runs again in
	// a fresh one, then k3: four runs for three requests.
	require.Equal(t, int64(4), attrs(r.one(t, "oncekv.apply_batch"))[oncekvotel.AttrEffectRuns].AsInt64())
}

func TestApplyBatchHasAnEventPerRequestAndALinkPerKey(t *testing.T) {
	r := newRig(t, nil)
	s := openStore(t)
	db := r.tel.DB(s.db)
	ctx := context.Background()
	_, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "k1"}, nil)
	require.NoError(t, err)
	reqs := []oncekv.Request{{Handler: "h", Key: "k1"}, {Handler: "h", Key: "k2"}, {Handler: "h", Key: "k2"}, {Handler: "h", Key: ""}}
	results, err := db.ApplyBatch(ctx, reqs, func(tx *oncekv.Tx, i int) ([]byte, error) { return []byte{byte(i)}, nil })
	require.NoError(t, err)
	require.Len(t, results, 4)

	sp := r.one(t, "oncekv.apply_batch")
	require.Equal(t, int64(4), attrs(sp)[oncekvotel.AttrBatchSize].AsInt64())
	require.Len(t, sp.Links(), 3, "a link per request with a key")
	require.Equal(t, r.tel.TraceID("k2"), sp.Links()[1].SpanContext.TraceID())
	events := sp.Events()
	require.Len(t, events, 4)
	got := []string{}
	for _, e := range events {
		for _, kv := range e.Attributes {
			if kv.Key == oncekvotel.AttrOutcome {
				got = append(got, kv.Value.AsString())
			}
		}
	}
	require.Equal(t, []string{"duplicate", "applied", "duplicate", "invalid"}, got)
	require.Equal(t, int64(1), attrs(sp)[oncekvotel.AttrEffectRuns].AsInt64(), "only k2 ran its effect")
}

// TestConcurrentDeliveriesOfOneKey: parallel deliveries of one key through
// one Telemetry apply once; every span is in the key's trace and says so.
func TestConcurrentDeliveriesOfOneKey(t *testing.T) {
	r := newRig(t, nil)
	s := openStore(t)
	db := r.tel.DB(s.db)
	const n = 16
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, put("k", "v"))
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	spans := r.ended("oncekv.apply")
	require.Len(t, spans, n)
	count := map[string]int{}
	for _, sp := range spans {
		count[str(sp, oncekvotel.AttrOutcome)]++
		require.Equal(t, r.tel.TraceID("k"), sp.SpanContext().TraceID())
	}
	require.Equal(t, map[string]int{"applied": 1, "duplicate": n - 1}, count)
}

// TestApplyWhoseEffectPanicsEndsItsSpan: the panic reaches the caller as
// Apply raises it, and the span is ended, not leaked.
func TestApplyWhoseEffectPanicsEndsItsSpan(t *testing.T) {
	r := newRig(t, nil)
	s := openStore(t)
	require.PanicsWithValue(t, "boom", func() {
		_, _ = r.tel.DB(s.db).Apply(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, func(*oncekv.Tx) ([]byte, error) {
			panic("boom")
		})
	})
	sp := r.one(t, "oncekv.apply")
	require.Empty(t, str(sp, oncekvotel.AttrOutcome), "no outcome: the call did not return")
	_, err := r.tel.DB(s.db).Apply(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, put("k", "v"))
	require.NoError(t, err, "nothing was recorded for the key")
}
