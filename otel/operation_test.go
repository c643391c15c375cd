package otel_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	oncekvotel "github.com/oncekv/oncekv/otel"
)

func TestKeyHashIsStableAcrossProcessesAndSecretsChangeIt(t *testing.T) {
	a, b := newRig(t, nil), newRig(t, nil)
	sa := newRig(t, &oncekvotel.Options{KeySecret: []byte("s3cret")})
	sb := newRig(t, &oncekvotel.Options{KeySecret: []byte("s3cret")})
	other := newRig(t, &oncekvotel.Options{KeySecret: []byte("other")})

	require.Equal(t, a.tel.KeyHash("k"), b.tel.KeyHash("k"), "two processes agree")
	require.Equal(t, sa.tel.KeyHash("k"), sb.tel.KeyHash("k"), "two processes with one secret agree")
	require.NotEqual(t, a.tel.KeyHash("k"), sa.tel.KeyHash("k"), "a secret changes the hash")
	require.NotEqual(t, sa.tel.KeyHash("k"), other.tel.KeyHash("k"))
	require.NotEqual(t, a.tel.KeyHash("k"), a.tel.KeyHash("k2"))
	require.Len(t, a.tel.KeyHash("k"), 32)
	require.Equal(t, a.tel.TraceID("k").String(), a.tel.KeyHash("k"))
	require.True(t, a.tel.TraceID("k").IsValid())
	require.Empty(t, a.tel.KeyHash(""))
	require.False(t, a.tel.TraceID("").IsValid())
}

// TestSampleRatioIsTheSDKsRatioRule: a key's operation trace is recorded
// exactly when the SDK's TraceIDRatioBased sampler would record its trace
// ID, so a user who gives both the same ratio gets the same keys.
func TestSampleRatioIsTheSDKsRatioRule(t *testing.T) {
	for _, ratio := range []float64{0.01, 0.25, 0.5, 0.9} {
		rec := newRig(t, &oncekvotel.Options{SampleRatio: ratio})
		sdk := sdktrace.TraceIDRatioBased(ratio)
		sampled := 0
		for i := range 2000 {
			key := fmt.Sprintf("key-%d", i)
			_, span := rec.tel.Start(context.Background(), "op", key)
			span.End()
			want := sdk.ShouldSample(sdktrace.SamplingParameters{TraceID: rec.tel.TraceID(key)}).Decision == sdktrace.RecordAndSample
			require.Equal(t, want, span.SpanContext().IsSampled(), "ratio %v key %s", ratio, key)
			if want {
				sampled++
			}
		}
		require.InDelta(t, ratio*2000, sampled, 2000*0.05+5, "ratio %v", ratio)
		require.Len(t, rec.spans.Ended(), sampled, "only the sampled spans reach the processor")
	}
	none := newRig(t, &oncekvotel.Options{SampleRatio: -1})
	_, span := none.tel.Start(context.Background(), "op", "k")
	span.End()
	require.False(t, span.SpanContext().IsSampled())
}

func TestStartNamesTheOperationOfTheBaggage(t *testing.T) {
	r := newRig(t, &oncekvotel.Options{RecordKeys: true})
	ctx, span := r.tel.Start(context.Background(), "first", "k")
	span.End()
	require.Equal(t, "k", baggage.FromContext(ctx).Member(oncekvotel.BaggageKey).Value())

	_, child := r.tel.Start(ctx, "second", "")
	child.End()
	require.Equal(t, span.SpanContext().SpanID(), r.one(t, "second").Parent().SpanID(), "already in k's trace: a child")
	require.Equal(t, "k", str(r.one(t, "second"), oncekvotel.AttrKey), "the baggage's key")

	ctx2, other := r.tel.Start(ctx, "third", "k2")
	other.End()
	require.Equal(t, r.tel.KeyHash("k2"), baggage.FromContext(ctx2).Member(oncekvotel.BaggageKeyHash).Value(), "a new operation replaces it")
	require.Equal(t, span.SpanContext().TraceID(), other.SpanContext().TraceID(), "in the caller's trace")
	require.Len(t, r.one(t, "third").Links(), 1)

	// A hash alone (a peer without RecordKeys) still names the trace.
	m, err := baggage.NewMemberRaw(oncekvotel.BaggageKeyHash, r.tel.KeyHash("k3"))
	require.NoError(t, err)
	b, err := baggage.New(m)
	require.NoError(t, err)
	_, fromHash := r.tel.Start(baggage.ContextWithBaggage(context.Background(), b), "fourth", "")
	fromHash.End()
	_, fromKey := r.tel.Start(context.Background(), "fifth", "k3")
	fromKey.End()
	require.Equal(t, r.tel.TraceID("k3"), fromHash.SpanContext().TraceID())
	require.Equal(t, r.one(t, "fifth").Parent().SpanID(), r.one(t, "fourth").Parent().SpanID(), "one placeholder, from the key or its hash")

	for _, bad := range []string{"xyz", "0123456789ABCDEF0123456789ABCDEF", "00000000000000000000000000000000", "0123456789abcdef0123456789abcde"} {
		m, err := baggage.NewMemberRaw(oncekvotel.BaggageKeyHash, bad)
		require.NoError(t, err)
		b, err := baggage.New(m)
		require.NoError(t, err)
		_, plain := r.tel.Start(baggage.ContextWithBaggage(context.Background(), b), "plain", "")
		plain.End()
	}
	require.Len(t, r.ended("plain"), 4)
	for _, sp := range r.ended("plain") {
		require.False(t, sp.Parent().IsValid(), "a baggage without a valid hash names no operation")
		require.Empty(t, str(sp, oncekvotel.AttrKeyHash))
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	_, err := oncekvotel.New(&oncekvotel.Options{SampleRatio: 2, MaxHandlers: -1, MaxDeadLetterScan: -1, RetryRatioWindow: -1})
	require.ErrorIs(t, err, oncekvotel.ErrInvalidOptions)
	for _, field := range []string{"SampleRatio", "MaxHandlers", "MaxDeadLetterScan", "RetryRatioWindow"} {
		require.ErrorContains(t, err, field)
	}
	tel, err := oncekvotel.New(nil)
	require.NoError(t, err, "nil means every default, on the global providers")
	require.NotNil(t, tel.Propagator())
}
