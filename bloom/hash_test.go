package bloom_test

import (
	"fmt"
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
