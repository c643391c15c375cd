package otel_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	oncekvotel "github.com/oncekv/oncekv/otel"
)

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
