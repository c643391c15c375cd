package otel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"

	"github.com/oncekv/oncekv"
	oncekvotel "github.com/oncekv/oncekv/otel"
)

func TestClaimCompleteAndItsDuplicate(t *testing.T) {
	r := newRig(t, nil)
	s := openStore(t)
	db := r.tel.DB(s.db)
	ctx := context.Background()
	key := keyLike(3)
	req := oncekv.Request{Handler: "charge", Key: key, Payload: []byte("42")}

	c, err := db.Claim(ctx, req, 30*time.Second)
	require.NoError(t, err)
	require.False(t, c.Done())
	require.NoError(t, c.Extend(ctx, time.Minute))
	res, err := c.Complete(ctx, []byte("receipt"), func(tx *oncekv.Tx) error {
		_, err := put("order", "paid")(tx)
		return err
	})
	require.NoError(t, err)
	require.Equal(t, "receipt", string(res.Response))

	again, err := db.Claim(ctx, req, 30*time.Second)
	require.NoError(t, err)
	require.True(t, again.Done(), "the wrapper keeps the claim's own methods")
	require.Equal(t, "receipt", string(again.Result().Response))

	claims := r.ended("oncekv.claim")
	require.Len(t, claims, 2)
	require.Equal(t, "claimed", str(claims[0], oncekvotel.AttrOutcome))
	require.Equal(t, int64(c.Token()), attrs(claims[0])[oncekvotel.AttrToken].AsInt64())
	require.Equal(t, t0.Add(30*time.Second).Format(time.RFC3339Nano), str(claims[0], oncekvotel.AttrLeaseUntil),
		"the lease's end by the store's clock")
	require.Equal(t, "duplicate", str(claims[1], oncekvotel.AttrOutcome))
	require.True(t, attrs(claims[1])[oncekvotel.AttrDuplicate].AsBool())

	ext := r.one(t, "oncekv.claim.extend")
	require.Equal(t, "extended", str(ext, oncekvotel.AttrOutcome))
	require.Equal(t, t0.Add(time.Minute).Format(time.RFC3339Nano), str(ext, oncekvotel.AttrLeaseUntil))
	complete := r.one(t, "oncekv.claim.complete")
	require.Equal(t, "applied", str(complete, oncekvotel.AttrOutcome))
	require.Equal(t, int64(1), attrs(complete)[oncekvotel.AttrEffectRuns].AsInt64())
	require.Equal(t, int64(c.Token()), attrs(complete)[oncekvotel.AttrToken].AsInt64())

	for _, sp := range r.spans.Ended() {
		require.Equal(t, r.tel.TraceID(key), sp.SpanContext().TraceID(), "%s is in the key's trace", sp.Name())
		require.Equal(t, "charge", str(sp, oncekvotel.AttrHandler), sp.Name())
	}
	requireNoKey(t, r, key)
}

func TestClaimFailAndTakeover(t *testing.T) {
	r := newRig(t, nil)
	s := openStore(t)
	db := r.tel.DB(s.db)
	ctx := context.Background()

	// A transient failure releases the key; a permanent one records it.
	released := oncekv.Request{Handler: "mail", Key: keyLike(3)}
	c, err := db.Claim(ctx, released, time.Minute)
	require.NoError(t, err)
	require.NoError(t, c.Fail(ctx, errors.New("smtp timeout for "+released.Key)))
	recorded := oncekv.Request{Handler: "mail", Key: keyLike(4)}
	c, err = db.Claim(ctx, recorded, time.Minute)
	require.NoError(t, err)
	require.NoError(t, c.Fail(ctx, oncekv.Permanent(errors.New("mailbox gone"))))
	_, err = db.Claim(ctx, recorded, time.Minute)
	require.ErrorIs(t, err, oncekv.ErrFailed)

	// A zombie: its lease runs out, another worker takes the key over with
	// a greater token, and the zombie's Complete is fenced.
	req := oncekv.Request{Handler: "mail", Key: keyLike(5)}
	zombie, err := db.Claim(ctx, req, time.Minute)
	require.NoError(t, err)
	_, err = db.Claim(ctx, req, time.Minute)
	require.ErrorIs(t, err, oncekv.ErrInProgress)
	s.clock.Advance(2 * time.Minute)
	taker, err := db.Claim(ctx, req, time.Minute)
	require.NoError(t, err)
	require.Greater(t, taker.Token(), zombie.Token())
	_, err = zombie.Complete(ctx, []byte("late"), nil)
	require.ErrorIs(t, err, oncekv.ErrFenced)
	require.ErrorIs(t, zombie.Extend(ctx, time.Minute), oncekv.ErrFenced)

	fails := r.ended("oncekv.claim.fail")
	require.Len(t, fails, 2)
	require.Equal(t, "released", str(fails[0], oncekvotel.AttrOutcome))
	require.Equal(t, codes.Unset, fails[0].Status().Code)
	require.True(t, hasEvent(fails[0], "oncekv.claim.fail"), "the cause is recorded")
	require.Equal(t, "failed", str(fails[1], oncekvotel.AttrOutcome))
	require.Equal(t, codes.Error, fails[1].Status().Code)

	claims := r.ended("oncekv.claim")
	outcomes := []string{}
	for _, sp := range claims {
		outcomes = append(outcomes, str(sp, oncekvotel.AttrOutcome))
	}
	require.Equal(t, []string{"claimed", "claimed", "failed", "claimed", "in_progress", "claimed"}, outcomes)
	require.True(t, attrs(claims[2])[oncekvotel.AttrDuplicate].AsBool(), "a replayed failure is a duplicate")

	complete := r.one(t, "oncekv.claim.complete")
	require.Equal(t, "fenced", str(complete, oncekvotel.AttrOutcome))
	require.Equal(t, "give_up", str(complete, oncekvotel.AttrAction))
	require.Equal(t, int64(zombie.Token()), attrs(complete)[oncekvotel.AttrToken].AsInt64(), "the zombie's own token")
	require.Equal(t, "fenced", str(r.one(t, "oncekv.claim.extend"), oncekvotel.AttrOutcome))
	for _, k := range []string{released.Key, recorded.Key, req.Key} {
		requireNoKey(t, r, k)
	}
}
