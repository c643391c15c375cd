package bloom

import (
	"fmt"
	"math"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// sanityBuffer fills n bytes the way the reference xxHash implementation
// generates its self-test input, so that its published vectors apply.
func sanityBuffer(n int) []byte {
	const prime32, prime64 = 2654435761, 11400714785074694797
	b := make([]byte, n)
	gen := uint64(prime32)
	for i := range b {
		b[i] = byte(gen >> 56)
		gen *= prime64
	}
	return b
}

// TestSum64ReferenceVectors checks the seeded vectors from the reference
// implementation's self-test (cli/xsum_sanity_check.c in Cyan4973/xxHash).
// The seed is not part of the public API, hence a whitebox test.
func TestSum64ReferenceVectors(t *testing.T) {
	const seed = 2654435761
	buf := sanityBuffer(222)
	for _, tc := range []struct {
		n    int
		seed uint64
		want uint64
	}{
		{0, 0, 0xEF46DB3751D8E999},
		{0, seed, 0xAC75FDA2929B17EF},
		{1, 0, 0xE934A84ADB052768},
		{1, seed, 0x5014607643A9B4C3},
		{4, 0, 0x9136A0DCA57457EE},
		{14, 0, 0x8282DCC4994E35C8},
		{14, seed, 0xC3BD6BF63DEB6DF0},
		{222, 0, 0xB641AE8CB691C174},
		{222, seed, 0x20CB8AB7AE10C14A},
	} {
		t.Run(fmt.Sprintf("len=%d/seed=%d", tc.n, tc.seed), func(t *testing.T) {
			require.Equal(t, tc.want, sum64Seed(buf[:tc.n], tc.seed))
		})
	}
}

// TestBlocksAreCacheLineAligned pins the allocator property newStage relies
// on. If it ever breaks, the filter stays correct but a block may straddle
// two cache lines.
func TestBlocksAreCacheLineAligned(t *testing.T) {
	sizes := []uint64{1000, 4097, 12345, 100_003}
	for n := uint64(1); n <= 300; n++ {
		sizes = append(sizes, n)
	}
	for _, n := range sizes {
		s := newStage(1, n, 1)
		addr := uintptr(unsafe.Pointer(&s.blocks[0]))
		require.Zero(t, addr%blockBytes, "%d blocks at %#x", n, addr)
	}
}

// TestSizingModel checks that the blocked model costs more bits than the
// classic formula (blocking cannot be free), but not absurdly more in the
// range oncekv uses, and that sizing is monotone in the rate.
func TestSizingModel(t *testing.T) {
	prev := 0.0
	for _, rate := range []float64{0.5, 0.1, 0.05, 0.01, 0.0075, 0.001, 1e-4, 1e-5, 1e-6} {
		p, ok := paramsFor(rate)
		require.True(t, ok, "rate %v", rate)
		classic := -math.Log(rate) / (math.Ln2 * math.Ln2)
		t.Logf("rate %-8v bits/key %6.2f (classic %6.2f, +%4.1f%%) k=%d",
			rate, p.bitsPerKey, classic, 100*(p.bitsPerKey/classic-1), p.k)
		require.GreaterOrEqual(t, p.bitsPerKey, classic-0.01)
		require.Less(t, p.bitsPerKey, 1.4*classic)
		require.Greater(t, p.bitsPerKey, prev)
		require.LessOrEqual(t, blockedFPR(p.bitsPerKey, p.k), rate)
		prev = p.bitsPerKey
	}

	// Rates no k can reach within one key per block are refused.
	_, ok := paramsFor(1e-300)
	require.False(t, ok)
}

// TestStageRatesSumToTarget checks the union-bound budget: however many
// stages a filter grows, their rates add up to at most the target.
func TestStageRatesSumToTarget(t *testing.T) {
	sum := 0.0
	for i := range maxStages {
		sum += stageRate(0.01, i)
		require.LessOrEqual(t, sum, 0.01)
	}
}
