package otel_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
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
