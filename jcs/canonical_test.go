package jcs_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/jcs"
)

// TestCanonicalizeModel: random values, each written as several texts
// (member order, whitespace, escapes, number spellings drawn at random),
// canonicalise to one form, the one the tests' own reading of the RFC
// writes for the value (canonical in helpers_test.go), which is its own
// canonical form.
func TestCanonicalizeModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 8785))
	sp := speller{rng: rng, space: " \t\n\r"}
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for range n {
		v := randomValue(rng, 4)
		want := canonical(v)
		for range 3 {
			text := sp.spell(v)
			got, err := jcs.Canonicalize([]byte(text))
			require.NoError(t, err, "%q (seed %d)", text, seed)
			require.Equal(t, want, string(got), "%q (seed %d)", text, seed)
		}
		again, err := jcs.Canonicalize([]byte(want))
		require.NoError(t, err, "seed %d", seed)
		require.Equal(t, want, string(again), "seed %d", seed)
	}
}

// TestNamesSortByUTF16: names sort by UTF-16 code units, which differs
// from Go's (UTF-8, code point) order exactly where a character above
// U+FFFF meets one from U+E000 to U+FFFF; escaped and raw spellings of a
// name sort alike.
func TestNamesSortByUTF16(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		// U+1F600 is D83D DE00 in UTF-16, before FFFD; in UTF-8 it is after.
		{`{"\ufffd":1,"😀":2}`, `{"😀":2,"` + "\ufffd" + `":1}`},
		{`{"` + "\ue000" + `":1,"\ud800\udc00":2}`, `{"` + "\U00010000" + `":2,"` + "\ue000" + `":1}`},
		// Below U+E000 the orders agree.
		{`{"😀":1,"\ud7ff":2}`, `{"` + "\ud7ff" + `":2,"😀":1}`},
		// Two characters above U+FFFF: code point order.
		{`{"\ud83d\ude01":1,"😀":2,"\udbff\udfff":3}`, `{"😀":2,"😁":1,"` + "\U0010FFFF" + `":3}`},
		// A prefix first; then by the first differing unit.
		{`{"ab":1,"a":2,"b":3,"":4,"B":5}`, `{"":4,"B":5,"a":2,"ab":1,"b":3}`},
		// Names the canonical form escapes sort by what they stand for:
		// U+0001 < LF < '!' < '"' < '[' < '\' < ']', though every escape
		// starts with '\'.
		{`{"]":7,"\\":6,"[":5,"\"":4,"!":3,"\n":2,"\u0001":1}`, `{"\u0001":1,"\n":2,"!":3,"\"":4,"[":5,"\\":6,"]":7}`},
		{`{"a\\b":2,"a\"b":1,"a\tb":0}`, `{"a\tb":0,"a\"b":1,"a\\b":2}`},
		{`{"\u00e9":1,"e\u0301":2,"e":3}`, "{\"e\":3,\"e\u0301\":2,\"\u00e9\":1}"},
	} {
		got, err := jcs.Canonicalize([]byte(c.in))
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, string(got), c.in)
	}
}

// TestStrings: only '"', '\' and C0 controls are escaped in a canonical
// string, controls in their short form where JSON has one, else \u00xx
// in lowercase; DEL, U+2028 and every other character are written raw.
func TestStrings(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`"\u0041\u00e9\u20AC\uD83D\uDE00"`, `"Aé€😀"`},
		{`"\/\"\\\b\f\n\r\t"`, `"/\"\\\b\f\n\r\t"`},
		{`"\u0000\u0001\u001F\u000b"`, `"\u0000\u0001\u001f\u000b"`},
		{`"\u0008\u0009\u000a\u000c\u000d"`, `"\b\t\n\f\r"`},
		{`"\u007f\u2028\u2029\ufeff"`, "\"\x7f\u2028\u2029\ufeff\""},
		{"\"\x7f\u2028\"", "\"\x7f\u2028\""},
		{`"A\u030a"`, "\"A\u030a\""}, // no Unicode normalisation
		{`""`, `""`},
	} {
		got, err := jcs.Canonicalize([]byte(c.in))
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, string(got), c.in)
	}
}

// TestScalarsAndSpace: any JSON value is accepted at the top, with
// whitespace (space, tab, LF, CR) around and inside; the output has none.
func TestScalarsAndSpace(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"null", "null"}, {" true ", "true"}, {"\tfalse\r\n", "false"}, {`"x"`, `"x"`}, {"4.50", "4.5"},
		{"[ ]", "[]"}, {"{ }", "{}"}, {"[ 1 , [ ] , { } ]", "[1,[],{}]"},
		{"{\n\t\"b\" :\r\n[ true ,null ] ,\"a\": {} }", `{"a":{},"b":[true,null]}`},
	} {
		got, err := jcs.Canonicalize([]byte(c.in))
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, string(got), c.in)
	}
}

// TestErrors: input with no canonical form gets an *Error saying which
// rule it broke, at which byte and at which JSON path.
func TestErrors(t *testing.T) {
	for _, c := range []struct {
		in     string
		err    error
		offset int
		path   string
		detail string // a part of it
	}{
		{``, jcs.ErrSyntax, 0, "$", "no JSON value"},
		{`  `, jcs.ErrSyntax, 2, "$", "no JSON value"},
		{"\ufeff{}", jcs.ErrSyntax, 0, "$", "where a value should be"},
		{`{} {}`, jcs.ErrSyntax, 3, "$", `"{" after the JSON value`},
		{`[1,]`, jcs.ErrSyntax, 3, "$[1]", `"]" where a value should be`},
		{`[1 2]`, jcs.ErrSyntax, 3, "$", "where an array needs ',' or ']'"},
		{`[1`, jcs.ErrSyntax, 2, "$", "ends inside an array"},
		{`{"a":1,}`, jcs.ErrSyntax, 7, "$", "where a member name should be"},
		{`{"a" 1}`, jcs.ErrSyntax, 5, "$['a']", "where ':' should follow"},
		{`{"a":1`, jcs.ErrSyntax, 6, "$", "ends inside an object"},
		{`{a:1}`, jcs.ErrSyntax, 1, "$", "where a member name should be"},
		{`{"a":{"b":[0,{"c":tru}]}}`, jcs.ErrSyntax, 18, "$['a']['b'][1]['c']", `"tru}" where a value should be`},
		{`[01]`, jcs.ErrSyntax, 1, "$[0]", "leading zero"},
		{`[-]`, jcs.ErrSyntax, 2, "$[0]", "needs a digit"},
		{`[1.]`, jcs.ErrSyntax, 3, "$[0]", "fraction needs a digit"},
		{`[.5]`, jcs.ErrSyntax, 1, "$[0]", "where a value should be"},
		{`[+1]`, jcs.ErrSyntax, 1, "$[0]", "where a value should be"},
		{`[1e]`, jcs.ErrSyntax, 3, "$[0]", "exponent needs a digit"},
		{`[NaN]`, jcs.ErrSyntax, 1, "$[0]", "where a value should be"},
		{`[Infinity]`, jcs.ErrSyntax, 1, "$[0]", "where a value should be"},
		{`"abc`, jcs.ErrSyntax, 0, "$", "never ends"},
		{"\"a\tb\"", jcs.ErrSyntax, 2, "$", "U+0009 unescaped"},
		{`"\x"`, jcs.ErrSyntax, 1, "$", `unknown escape \"x"`},
		{`"\u12G4"`, jcs.ErrSyntax, 5, "$", `"G" where a \u escape needs a hex digit`},
		{`"\u12`, jcs.ErrSyntax, 1, "$", `cut short`},
		{"\"\xff\"", jcs.ErrInvalidUTF8, 1, "$", "0xff"},
		{"{\"k\":\"a\xed\xa0\x80\"}", jcs.ErrInvalidUTF8, 7, "$['k']", "0xed"}, // a raw surrogate
		{"[\"\xc0\xaf\"]", jcs.ErrInvalidUTF8, 2, "$[0]", "0xc0"},              // overlong '/'
		{"{\"\xe2\x82\":1}", jcs.ErrInvalidUTF8, 2, "$", "0xe2"},               // cut short, in a name
		{`["\ud800"]`, jcs.ErrLoneSurrogate, 2, "$[0]", "high surrogate with no"},
		{`["\ud800x"]`, jcs.ErrLoneSurrogate, 2, "$[0]", "high surrogate with no"},
		{`["\ud800\u0041"]`, jcs.ErrLoneSurrogate, 2, "$[0]", `followed by \u0041`},
		{`["\ud800\ud800"]`, jcs.ErrLoneSurrogate, 2, "$[0]", `followed by \ud800`},
		{`{"\udc00":1}`, jcs.ErrLoneSurrogate, 2, "$", "low surrogate"},
		{`{"a":1,"b":2,"a":3}`, jcs.ErrDuplicateName, 13, "$['a']", `the name "a" again (first at offset 1)`},
		{`{"x":[{"\u0061":1,"a":2}]}`, jcs.ErrDuplicateName, 18, "$['x'][0]['a']", "first at offset 7"},
		{`{"it's":{"\\":0,"\\":1}}`, jcs.ErrDuplicateName, 16, `$['it\'s']['\\']`, ""},
		{"{\"\\n\":{\"q\":{}},\"\\n\":0}", jcs.ErrDuplicateName, 15, `$['\n']`, ""},
		{`[1e309]`, jcs.ErrNumberRange, 1, "$[0]", `"1e309" is beyond the range`},
		{`{"n":-1.8e308}`, jcs.ErrNumberRange, 5, "$['n']", "beyond the range"},
		{strings.Repeat("[", jcs.MaxDepth+1), jcs.ErrTooDeep, jcs.MaxDepth, "$" + strings.Repeat("[0]", jcs.MaxDepth), "more than 10000"},
		{strings.Repeat(`{"a":`, jcs.MaxDepth+1), jcs.ErrTooDeep, 5 * jcs.MaxDepth, "$" + strings.Repeat("['a']", jcs.MaxDepth), ""},
	} {
		_, err := jcs.Canonicalize([]byte(c.in))
		require.ErrorIs(t, err, c.err, "%q", c.in)
		var e *jcs.Error
		require.True(t, errors.As(err, &e), "%q: %T", c.in, err)
		require.Equal(t, c.offset, e.Offset, "%q: %v", c.in, err)
		require.Equal(t, c.path, e.Path, "%q: %v", c.in, err)
		require.Contains(t, e.Detail, c.detail, "%q: %v", c.in, err)
		require.True(t, strings.HasPrefix(err.Error(), "oncekv: jcs: "), err.Error())

		_, ferr := jcs.Fingerprint([]byte(c.in))
		require.Equal(t, err, ferr, "%q: Fingerprint fails as Canonicalize does", c.in)
	}
	// The deepest nesting allowed is allowed.
	deep := strings.Repeat("[", jcs.MaxDepth) + strings.Repeat("]", jcs.MaxDepth)
	got, err := jcs.Canonicalize([]byte(deep))
	require.NoError(t, err)
	require.Equal(t, deep, string(got))
}

// TestErrorDetailIsShort: an error quotes at most 64 bytes of the input,
// however long the offending name.
func TestErrorDetailIsShort(t *testing.T) {
	name := strings.Repeat("é", 1000)
	_, err := jcs.Canonicalize([]byte(`{"` + name + `":1,"` + name + `":2}`))
	require.ErrorIs(t, err, jcs.ErrDuplicateName)
	var e *jcs.Error
	require.ErrorAs(t, err, &e)
	require.Less(t, len(e.Detail), 120, e.Detail)
	require.Equal(t, "$['"+name+"']", e.Path, "the path is whole")
}

// TestInputUntouched: Canonicalize never changes its input, and its
// result is the caller's: later calls, concurrent ones included, do not
// write over it.
func TestInputUntouched(t *testing.T) {
	in := []byte(`{"b":[1.0,"\u00e9"],"a":{"d":1,"c":2}}`)
	orig := bytes.Clone(in)
	first, err := jcs.Canonicalize(in)
	require.NoError(t, err)
	want := bytes.Clone(first)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 200 {
				other := []byte(`{"z":` + strings.Repeat("1", 1+(i+j)%15) + `,"y":[` + strings.Repeat(`"x",`, j) + `0]}`)
				_, err := jcs.Canonicalize(other)
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, orig, in)
	require.Equal(t, want, first)
	require.Equal(t, `{"a":{"c":2,"d":1},"b":[1,"é"]}`, string(first))
}

// TestMemoryBound: canonicalising allocates at most 24 bytes per byte of
// input, whatever its shape (objects to reorder are the worst, nested
// the worst of them, about 22), less than encoding/json allocates to
// decode the same text into an any (30 to 60 for these), and at most 3
// when the objects are in order.
func TestMemoryBound(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates for itself: the bound is checked without -race")
	}
	const size = 256 << 10
	for _, c := range []struct {
		name, text string
		bound      float64
	}{
		{"objects to reorder", "[" + strings.Repeat(`{"b":0,"":0},`, size/13) + "0]", 24},
		{"one large object", "{" + manyNames(size/8) + "}", 24},
		{"nested, reordered", strings.Repeat(`{"b":0,"":`, jcs.MaxDepth) + "0" + strings.Repeat("}", jcs.MaxDepth), 24},
		{"in order", "[" + strings.Repeat(`{"a":1,"b":0},`, size/14) + "0]", 3},
		{"numbers", "[" + strings.Repeat(`1.5e3,`, size/6) + "0]", 3},
	} {
		in := []byte(c.text)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := jcs.Canonicalize(in)
		runtime.ReadMemStats(&after)
		require.NoError(t, err, c.name)
		perByte := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(in))
		t.Logf("%s: %d bytes, %.1f bytes allocated per byte", c.name, len(in), perByte)
		require.LessOrEqual(t, perByte, c.bound, c.name)
	}
}

// manyNames is the members of an object, n of them, in reverse order.
func manyNames(n int) string {
	var b strings.Builder
	for i := n; i > 0; i-- {
		if i < n {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%x":0`, i)
	}
	return b.String()
}
