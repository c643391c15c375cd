package jcs_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// The tests' model of a JSON value, built apart from the package: a value
// is nil, bool, float64, string, []any or object, and spell writes one of
// its many texts while canonical writes what RFC 8785 says its canonical
// form is, each from its own reading of the RFC.

// object is a JSON object: its members in the order they are written.
type object []member

type member struct {
	name  string
	value any
}

// esNumber writes f as ECMAScript's Number.prototype.toString does,
// derived independently of the package: strconv's 'g' form, taken apart
// into its digits and decimal point, then placed by the rules of
// ECMA-262 Number::toString.
func esNumber(f float64) string {
	if f == 0 {
		return "0"
	}
	g := strconv.FormatFloat(f, 'g', -1, 64) // 123.45, 1.5e-07, 1e+21
	sign := ""
	if g[0] == '-' {
		sign, g = "-", g[1:]
	}
	mant, exp := g, 0
	if i := strings.IndexByte(g, 'e'); i >= 0 {
		mant = g[:i]
		var err error
		if exp, err = strconv.Atoi(g[i+1:]); err != nil {
			panic(err)
		}
	}
	whole, frac, _ := strings.Cut(mant, ".")
	all := whole + frac
	lead := len(all) - len(strings.TrimLeft(all, "0"))
	s := strings.TrimRight(all[lead:], "0") // the significant digits
	n := len(whole) - lead + exp            // f = 0.s × 10^n
	k := len(s)
	var out string
	switch {
	case n >= k && n <= 21:
		out = s + strings.Repeat("0", n-k)
	case n > 0 && n <= 21:
		out = s[:n] + "." + s[n:]
	case n > -6 && n <= 0:
		out = "0." + strings.Repeat("0", -n) + s
	default:
		e := fmt.Sprintf("e%+d", n-1)
		if k == 1 {
			out = s + e
		} else {
			out = s[:1] + "." + s[1:] + e
		}
	}
	return sign + out
}

// canonical writes v's canonical form as the RFC's prose describes it:
// names sorted as arrays of UTF-16 code units, numbers by esNumber,
// strings escaping only '"', '\' and the C0 controls.
func canonical(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(v)
	case float64:
		return esNumber(v)
	case string:
		var b strings.Builder
		b.WriteByte('"')
		for _, r := range v {
			switch {
			case r == '"' || r == '\\':
				b.WriteByte('\\')
				b.WriteRune(r)
			case r == '\b':
				b.WriteString(`\b`)
			case r == '\t':
				b.WriteString(`\t`)
			case r == '\n':
				b.WriteString(`\n`)
			case r == '\f':
				b.WriteString(`\f`)
			case r == '\r':
				b.WriteString(`\r`)
			case r < 0x20:
				fmt.Fprintf(&b, `\u%04x`, r)
			default:
				b.WriteRune(r)
			}
		}
		b.WriteByte('"')
		return b.String()
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = canonical(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case object:
		ms := slices.Clone(v)
		slices.SortFunc(ms, func(a, b member) int {
			return slices.Compare(utf16.Encode([]rune(a.name)), utf16.Encode([]rune(b.name)))
		})
		parts := make([]string, len(ms))
		for i, m := range ms {
			parts[i] = canonical(m.name) + ":" + canonical(m.value)
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	panic(fmt.Sprintf("not a model value: %T", v))
}

// speller writes texts of a value, each choice (whitespace, escapes,
// number spelling, member order) drawn from rng.
type speller struct {
	rng *rand.Rand
	// space are the whitespace characters used between tokens.
	space string
}

func (s speller) spell(v any) string {
	var b bytes.Buffer
	s.write(&b, v)
	s.ws(&b)
	return b.String()
}

func (s speller) ws(b *bytes.Buffer) {
	for s.rng.IntN(3) == 0 {
		b.WriteByte(s.space[s.rng.IntN(len(s.space))])
	}
}

func (s speller) write(b *bytes.Buffer, v any) {
	s.ws(b)
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case float64:
		b.WriteString(s.number(v))
	case string:
		s.str(b, v)
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				s.ws(b)
				b.WriteByte(',')
			}
			s.write(b, e)
		}
		s.ws(b)
		b.WriteByte(']')
	case object:
		ms := slices.Clone(v)
		s.rng.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
		b.WriteByte('{')
		for i, m := range ms {
			if i > 0 {
				s.ws(b)
				b.WriteByte(',')
			}
			s.ws(b)
			s.str(b, m.name)
			s.ws(b)
			b.WriteByte(':')
			s.write(b, m.value)
		}
		s.ws(b)
		b.WriteByte('}')
	default:
		panic(fmt.Sprintf("not a model value: %T", v))
	}
}

// number spells f in one of the ways that read back as f.
func (s speller) number(f float64) string {
	switch s.rng.IntN(8) {
	case 0:
		return strconv.FormatFloat(f, 'e', -1, 64)
	case 1:
		return strings.ToUpper(strconv.FormatFloat(f, 'e', 20, 64)) // more digits than it needs
	case 2:
		if math.Abs(f) < 1e30 {
			return strconv.FormatFloat(f, 'f', -1, 64)
		}
	case 3:
		if f == math.Trunc(f) && math.Abs(f) < 1e15 {
			return strconv.FormatFloat(f, 'f', 1+s.rng.IntN(3), 64) // 1.0, 1.00
		}
	case 4:
		if f == 0 {
			return "-0.0e+00"
		}
		mant, exp, _ := strings.Cut(strconv.FormatFloat(f, 'e', -1, 64), "e")
		if !strings.Contains(mant, ".") {
			mant += "."
		}
		e, _ := strconv.Atoi(exp)
		return mant + "0E" + strconv.Itoa(e) // 1.50E3, 1.0E-7
	case 5:
		mant, exp, _ := strings.Cut(strconv.FormatFloat(f, 'e', -1, 64), "e")
		return mant + "e" + exp[:1] + "00" + exp[1:] // leading zeros in the exponent
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// str spells a string, each character raw or escaped in a way JSON
// allows; the characters JSON requires escaped always are.
func (s speller) str(b *bytes.Buffer, v string) {
	b.WriteByte('"')
	for _, r := range v {
		must := r < 0x20 || r == '"' || r == '\\'
		if !must && s.rng.IntN(4) != 0 {
			b.WriteRune(r)
			continue
		}
		short := map[rune]string{'"': `\"`, '\\': `\\`, '/': `\/`, '\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`}[r]
		switch {
		case short != "" && s.rng.IntN(2) == 0:
			b.WriteString(short)
		case r >= 0x10000:
			hi, lo := utf16.EncodeRune(r)
			fmt.Fprintf(b, s.hexCase(`\u%04x\u%04x`), hi, lo)
		default:
			fmt.Fprintf(b, s.hexCase(`\u%04x`), r)
		}
	}
	b.WriteByte('"')
}

func (s speller) hexCase(format string) string {
	if s.rng.IntN(2) == 0 {
		return strings.ReplaceAll(format, "x", "X")
	}
	return format
}

// nameRunes are characters names and strings are drawn from: ASCII, the
// controls and characters JSON escapes, and the ranges where UTF-16 and
// UTF-8 orders disagree (U+E000 to U+FFFF against U+10000 and above).
var nameRunes = []rune{
	'a', 'b', 'A', 'B', '0', '1', '_', ' ', '"', '\\', '/', '\'', 0, 1, '\b', '\t', '\n', '\f', '\r', 0x1f, 0x7f,
	0x80, 0xe9, 0x301, 0x20ac, 0x2028, 0x2029, 0xd7ff, 0xe000, 0xfb33, 0xfeff, 0xfffd, 0xffff,
	0x10000, 0x1f600, 0x1f601, 0x10ffff,
}

// randomString draws a string of up to max characters, mostly from
// nameRunes and sometimes any valid character.
func randomString(rng *rand.Rand, max int) string {
	var b strings.Builder
	for range rng.IntN(max + 1) {
		r := nameRunes[rng.IntN(len(nameRunes))]
		if rng.IntN(4) == 0 {
			for r = rune(rng.IntN(0x110000)); !utf8.ValidRune(r); r = rune(rng.IntN(0x110000)) {
			}
		}
		b.WriteRune(r)
	}
	return b.String()
}

// randomNumber draws a double: small integers, round decimals, values at
// the edges of ECMAScript's notations (1e21, 1e-6), any bit pattern.
func randomNumber(rng *rand.Rand) float64 {
	for {
		var f float64
		switch rng.IntN(6) {
		case 0:
			f = float64(rng.IntN(2001) - 1000)
		case 1:
			f = float64(rng.IntN(100000)) / math.Pow10(rng.IntN(8))
		case 2:
			f = math.Pow10(rng.IntN(50) - 25)
			for range rng.IntN(3) {
				f = math.Nextafter(f, math.Inf(2*rng.IntN(2)-1))
			}
		case 3:
			f = float64(rng.Int64()) // beyond 2^53: rounded
		default:
			f = math.Float64frombits(rng.Uint64())
		}
		if rng.IntN(2) == 0 {
			f = -f
		}
		if !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f
		}
	}
}

// randomValue draws a value nested at most depth deep.
func randomValue(rng *rand.Rand, depth int) any {
	n := 6
	if depth > 0 {
		n = 8
	}
	switch rng.IntN(n) {
	case 0:
		return nil
	case 1:
		return rng.IntN(2) == 0
	case 2, 3:
		return randomNumber(rng)
	case 4, 5:
		return randomString(rng, 8)
	case 6:
		a := make([]any, rng.IntN(5))
		for i := range a {
			a[i] = randomValue(rng, depth-1)
		}
		return a
	default:
		var o object
		seen := map[string]bool{} // bounded: at most 6 names
		for range rng.IntN(7) {
			name := randomString(rng, 3)
			if !seen[name] {
				seen[name] = true
				o = append(o, member{name, randomValue(rng, depth-1)})
			}
		}
		return o
	}
}
