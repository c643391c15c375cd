package otel_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"

	oncekvotel "github.com/oncekv/oncekv/otel"
)

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
