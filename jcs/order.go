package jcs

import (
	"cmp"
	"unicode/utf8"
)

// compareNames orders two member names, in canonical form without their
// quotes, as RFC 8785 section 3.2.3 sorts them: by the UTF-16 code units
// of the strings they stand for, not by their bytes. The canonical form
// escapes only '"', '\' and controls, so a name is read a character (or
// one escape) at a time. UTF-16 and UTF-8 orders differ where a character
// above U+FFFF (a surrogate pair, D800 to DBFF first) meets one from
// U+E000 to U+FFFF: UTF-8 puts the former last, UTF-16 first.
func compareNames(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) {
		// Equal characters have equal forms, so both names are at a
		// character's start.
		if c := a[i]; c == b[i] && c < utf8.RuneSelf && c != '\\' {
			i++
			continue
		}
		ra, n := nameRune(a[i:])
		rb, _ := nameRune(b[i:])
		if ra != rb {
			return compareRunes(ra, rb)
		}
		i += n // in both: equal characters have equal forms
	}
	return cmp.Compare(len(a), len(b))
}

// compareRunes orders two characters by their UTF-16 code units.
func compareRunes(a, b rune) int {
	if c := cmp.Compare(firstUnit(a), firstUnit(b)); c != 0 {
		return c
	}
	return cmp.Compare(a, b) // one high surrogate: the low ones keep code point order
}

// firstUnit is the first UTF-16 code unit of r.
func firstUnit(r rune) rune {
	if r < 0x10000 {
		return r
	}
	return 0xd800 + (r-0x10000)>>10
}

// nameRune reads the character at the start of s, a name in canonical
// form: an escape (\", \\, \b, \t, \n, \f, \r, \u00xx) or a UTF-8
// character. It returns it and its length in s.
func nameRune(s []byte) (rune, int) {
	if s[0] != '\\' {
		return utf8.DecodeRune(s)
	}
	switch s[1] {
	case 'b':
		return '\b', 2
	case 't':
		return '\t', 2
	case 'n':
		return '\n', 2
	case 'f':
		return '\f', 2
	case 'r':
		return '\r', 2
	case 'u':
		return rune(unhex(s[4])<<4 | unhex(s[5])), 6 // \u00xx
	}
	return rune(s[1]), 2 // \" or \\
}

// unhex is the value of a lowercase hex digit.
func unhex(c byte) byte {
	if c >= 'a' {
		return c - 'a' + 10
	}
	return c - '0'
}

// decodeName returns the string a name in canonical form stands for, for
// an error's path.
func decodeName(s []byte) []byte {
	out := make([]byte, 0, len(s))
	for len(s) > 0 {
		r, n := nameRune(s)
		out = utf8.AppendRune(out, r)
		s = s[n:]
	}
	return out
}
