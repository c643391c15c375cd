package bloom_test

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/bloom"
)

// TestSum64Vectors checks published xxHash64 (seed 0) values for inputs
// that cover every tail path: empty, 1-3 bytes, 4, 8+, one and several
// 32-byte stripes.
func TestSum64Vectors(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
	}{
		{"", 0xef46db3751d8e999},
		{"a", 0xd24ec4f1a98c6e5b},
		{"as", 0x1c330fb2d66be179},
		{"ab", 0x65f708ca92d04a61},
		{"abc", 0x44bc2cf5ad770999},
		{"ABC", 0xe66ae7354fcfee98},
		{"asd", 0x631c37ce72a97393},
		{"asdf", 0x415872f599cea71e},
		{"xxhash", 0x32dd38952c4bc720},
		{"abcdefghijklmnopqrstuvwxyz12345", 0x467605901b01d6f6},
		// 63 bytes: one stripe, three 8-byte words, a 4-byte word, 3 bytes.
		{"Call me Ishmael. Some years ago--never mind how long precisely-", 0x02a2e85470d6fd96},
	} {
		t.Run(fmt.Sprintf("%q", tc.in), func(t *testing.T) {
			require.Equal(t, tc.want, bloom.Sum64([]byte(tc.in)))
		})
	}
}

func TestSum64PairIsLengthPrefixedConcatenation(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"", ""},
		{"handler", ""},
		{"", "key"},
		{"orders.charge", "3f6c1d52-5b1e-4a43-9d55-0f8a8a1ad0c1"},
		{string(make([]byte, 200)), "k"}, // two-byte varint, several stripes
		{"h", string(make([]byte, 95))},
		// Either side of the longest pair hashed from a stack copy (128).
		{strings.Repeat("h", 100), strings.Repeat("k", 27)},
		{strings.Repeat("h", 100), strings.Repeat("k", 28)},
	} {
		want := binary.AppendUvarint(nil, uint64(len(tc.a)))
		want = append(append(want, tc.a...), tc.b...)
		require.Equal(t, bloom.Sum64(want), bloom.Sum64Pair([]byte(tc.a), []byte(tc.b)))
	}

	// The prefix is what keeps the scope unambiguous.
	require.NotEqual(t,
		bloom.Sum64Pair([]byte("ab"), []byte("c")),
		bloom.Sum64Pair([]byte("a"), []byte("bc")))
}

func TestSum64PairDoesNotAllocate(t *testing.T) {
	h, k := []byte("orders.charge"), []byte("3f6c1d52-5b1e-4a43-9d55-0f8a8a1ad0c1")
	allocs := testing.AllocsPerRun(100, func() { bloom.Sum64Pair(h, k) })
	require.Zero(t, allocs)
}
