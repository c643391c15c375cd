package jcs_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/jcs"
)

// es6Numbers returns the sequence of doubles of the reference
// implementation's number test file (testdata/README.md): its 168 fixed
// values, then the 2000 doubles from 0x0010000000000000 up, then the
// doubles read from a chain of SHA-256 blocks, the first from 32 zero
// bytes, 8 little-endian bytes at a time, zeros, NaN and infinities
// skipped.
func es6Numbers(t *testing.T) func() float64 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "es6numgen-static.txt"))
	require.NoError(t, err)
	var static []uint64
	for _, line := range strings.Fields(string(raw)) {
		bits, err := strconv.ParseUint(line, 16, 64)
		require.NoError(t, err)
		static = append(static, bits)
	}
	require.Len(t, static, 168)
	const serial = 2000
	var (
		idx   int
		block [sha256.Size]byte
		data  []byte
	)
	return func() float64 {
		defer func() { idx++ }()
		switch {
		case idx < len(static):
			return math.Float64frombits(static[idx])
		case idx < len(static)+serial:
			return math.Float64frombits(0x0010000000000000 + uint64(idx-len(static)))
		}
		for {
			if len(data) == 0 {
				block = sha256.Sum256(block[:])
				data = block[:]
			}
			f := math.Float64frombits(binary.LittleEndian.Uint64(data))
			data = data[8:]
			if f != 0 && !math.IsNaN(f) && !math.IsInf(f, 0) {
				return f
			}
		}
	}
}

// TestES6NumberFile: the lines "hex-bits,serialisation\n" written with
// the package's number formatting hash to the SHA-256 checksums that the
// reference implementation publishes for the first 1000, 10000, 100000
// and 1000000 lines of its 100-million-line test file (100000 with
// -short; ONCEKV_JCS_NUMBER_LINES=10000000 checks ten million).
func TestES6NumberFile(t *testing.T) {
	sums := []struct {
		lines int
		sum   string
		size  int64
	}{
		{1000, "be18b62b6f69cdab33a7e0dae0d9cfa869fda80ddc712221570f9f40a5878687", 37967},
		{10000, "b9f7a8e75ef22a835685a52ccba7f7d6bdc99e34b010992cbc5864cd12be6892", 399022},
		{100000, "22776e6d4b49fa294a0d0f349268e5c28808fe7e0cb2bcbe28f63894e494d4c7", 4031728},
		{1000000, "49415fee2c56c77864931bd3624faad425c3c577d6d74e89a83bc725506dad16", 40357417},
		{10000000, "b9f8a44a91d46813b21b9602e72f112613c91408db0b8341fb94603d9db135e0", 403630048},
	}
	limit := 1000000
	if testing.Short() {
		limit = 100000
	}
	if v := os.Getenv("ONCEKV_JCS_NUMBER_LINES"); v != "" {
		var err error
		limit, err = strconv.Atoi(v)
		require.NoError(t, err, "ONCEKV_JCS_NUMBER_LINES")
	}
	next := es6Numbers(t)
	h := sha256.New()
	w := bufio.NewWriterSize(h, 1<<16)
	var line []byte
	var size int64
	checked := 0
	for n := 1; checked < len(sums) && sums[checked].lines <= limit; n++ {
		f := next()
		line = strconv.AppendUint(line[:0], math.Float64bits(f), 16)
		line = append(line, ',')
		line = append(line, jcs.FormatNumber(f)...)
		line = append(line, '\n')
		_, _ = w.Write(line)
		size += int64(len(line))
		if n == sums[checked].lines {
			require.NoError(t, w.Flush())
			require.Equal(t, sums[checked].size, size, "bytes in the first %d lines", n)
			require.Equal(t, sums[checked].sum, hex.EncodeToString(h.Sum(nil)), "SHA-256 of the first %d lines", n)
			checked++
		}
	}
	require.GreaterOrEqual(t, checked, 3)
	t.Logf("the first %d lines of es6testfile100m.txt match", sums[checked-1].lines)
}

// TestNumberAgainstStrconv: for a million random doubles (bit patterns,
// round decimals, powers of ten and their neighbours), the package's
// serialisation equals esNumber's, derived from strconv's 'g' form by
// other code, and reads back as the same double.
func TestNumberAgainstStrconv(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 24))
	n := 1000000
	if testing.Short() {
		n = 100000
	}
	for range n {
		f := randomNumber(rng)
		got := jcs.FormatNumber(f)
		if want := esNumber(f); got != want {
			t.Fatalf("%v (%016x): got %s, want %s (seed %d)", f, math.Float64bits(f), got, want, seed)
		}
		back, err := strconv.ParseFloat(got, 64)
		if err != nil || back != f && !(f == 0 && back == 0) {
			t.Fatalf("%s reads back as %v, %v, not %v (seed %d)", got, back, err, f, seed)
		}
	}
}

// TestNumberLiterals: the parser reads a number's text as ECMAScript
// does before writing it: spellings of one value agree, integers past
// 2^53 round to a double, what rounds to zero is 0.
func TestNumberLiterals(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"1", "1"}, {"1.0", "1"}, {"1e0", "1"}, {"1E+0", "1"}, {"10e-1", "1"}, {"0.1e1", "1"}, {"1.000000000000000000001", "1"},
		{"-0", "0"}, {"-0.0", "0"}, {"0e-5", "0"}, {"-0e+999999", "0"},
		{"1e-400", "0"}, {"-2e-324", "0"}, {"3e-324", "5e-324"},
		{"100", "100"}, {"1e2", "100"}, {"1e20", "100000000000000000000"}, {"1e21", "1e+21"},
		{"999999999999999", "999999999999999"},           // 15 digits: the fast path
		{"-999999999999999", "-999999999999999"},         //
		{"9007199254740993", "9007199254740992"},         // 16 digits: rounded to a double
		{"12345678901234567890", "12345678901234567000"}, //
		{"0.10000000000000000555", "0.1"},                // closer to 0.1's double than to its neighbours
		{"0.000001", "0.000001"}, {"0.0000001", "1e-7"}, {"1.5e-7", "1.5e-7"},
		{"333333333.33333329", "333333333.3333333"}, {"4.50", "4.5"}, {"2e-3", "0.002"},
		{"1.7976931348623157e308", "1.7976931348623157e+308"},
		{"1.7976931348623158e308", "1.7976931348623157e+308"}, // within half an ulp of the largest double
		{"0." + strings.Repeat("0", 400) + "1e401", "1"},      // long mantissas are read exactly
	} {
		got, err := jcs.Canonicalize([]byte(c.in))
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, string(got), c.in)
	}
}
