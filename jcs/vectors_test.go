package jcs_test

import (
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/jcs"
)

// TestReferenceVectors: every input file of the reference implementation's
// test data canonicalises to its output file, byte for byte, and to its
// hex dump (testdata/README.md says where they come from).
func TestReferenceVectors(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "rfc8785", "input", "*.json"))
	require.NoError(t, err)
	require.Len(t, inputs, 6, "the reference implementation has six vectors")
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".json")
		t.Run(name, func(t *testing.T) {
			input, err := os.ReadFile(in)
			require.NoError(t, err)
			want, err := os.ReadFile(filepath.Join("testdata", "rfc8785", "output", name+".json"))
			require.NoError(t, err)
			dump, err := os.ReadFile(filepath.Join("testdata", "rfc8785", "outhex", name+".txt"))
			require.NoError(t, err)
			wantHex, err := hex.DecodeString(strings.Join(strings.Fields(string(dump)), ""))
			require.NoError(t, err)
			require.Equal(t, want, wantHex, "the output file and its hex dump disagree")

			got, err := jcs.Canonicalize(input)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got))
		})
	}
}

// TestRFCSortingExample: the example of RFC 8785 section 3.2.3, whose
// names sort differently by UTF-16 code units than by UTF-8 bytes:
// U+1F600 (D83D DE00 in UTF-16, F0 9F 98 80 in UTF-8) sorts before
// U+FB33 (FB33, EF AC B3).
func TestRFCSortingExample(t *testing.T) {
	input := `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`
	want := "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\"," +
		"\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\"," +
		"\"\U0001F600\":\"Emoji: Grinning Face\",\"\uFB33\":\"Hebrew Letter Dalet With Dagesh\"}"
	got, err := jcs.Canonicalize([]byte(input))
	require.NoError(t, err)
	require.Equal(t, want, string(got))
	require.Greater(t, "\U0001F600", "\uFB33", "in UTF-8 the order is the other way round, which is the point of the example")
}

// TestRFCNumberSamples: the IEEE-754 values of RFC 8785 appendix B and
// their serialisations; NaN and Infinity, the table's error cases, cannot
// be written in JSON, and the number literals that would read as
// Infinity are refused.
func TestRFCNumberSamples(t *testing.T) {
	for _, c := range []struct{ bits, want string }{
		{"0000000000000000", "0"},                         // zero
		{"8000000000000000", "0"},                         // minus zero
		{"0000000000000001", "5e-324"},                    // min pos number
		{"8000000000000001", "-5e-324"},                   // min neg number
		{"7fefffffffffffff", "1.7976931348623157e+308"},   // max pos number
		{"ffefffffffffffff", "-1.7976931348623157e+308"},  // max neg number
		{"4340000000000000", "9007199254740992"},          // max pos int
		{"c340000000000000", "-9007199254740992"},         // max neg int
		{"4430000000000000", "295147905179352830000"},     // ~2**68
		{"44b52d02c7e14af5", "9.999999999999997e+22"},     //
		{"44b52d02c7e14af6", "1e+23"},                     //
		{"44b52d02c7e14af7", "1.0000000000000001e+23"},    //
		{"444b1ae4d6e2ef4e", "999999999999999700000"},     //
		{"444b1ae4d6e2ef4f", "999999999999999900000"},     //
		{"444b1ae4d6e2ef50", "1e+21"},                     //
		{"3eb0c6f7a0b5ed8c", "9.999999999999997e-7"},      //
		{"3eb0c6f7a0b5ed8d", "0.000001"},                  //
		{"41b3de4355555553", "333333333.3333332"},         //
		{"41b3de4355555554", "333333333.33333325"},        //
		{"41b3de4355555555", "333333333.3333333"},         //
		{"41b3de4355555556", "333333333.3333334"},         //
		{"41b3de4355555557", "333333333.33333343"},        //
		{"becbf647612f3696", "-0.0000033333333333333333"}, //
		{"43143ff3c1cb0959", "1424953923781206.2"},        // round to even
	} {
		bits, err := strconv.ParseUint(c.bits, 16, 64)
		require.NoError(t, err)
		f := math.Float64frombits(bits)
		require.Equal(t, c.want, jcs.FormatNumber(f), c.bits)
		// And through the parser, from the literal Go writes for f.
		got, err := jcs.Canonicalize(strconv.AppendFloat(nil, f, 'g', -1, 64))
		require.NoError(t, err)
		require.Equal(t, c.want, string(got), c.bits)
	}
	for _, lit := range []string{"1e309", "-1e309", "1.7976931348623159e308", "2e308"} {
		_, err := jcs.Canonicalize([]byte(lit))
		require.ErrorIs(t, err, jcs.ErrNumberRange, lit)
	}
}
