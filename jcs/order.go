package jcs

import "unicode/utf8"

// compareNames orders two member names, valid UTF-8, as RFC 8785 section
// 3.2.3 sorts them: by their UTF-16 code units, not their UTF-8 bytes. The
// two orders differ only where a character above U+FFFF (a surrogate
// pair, D800 to DBFF first) meets one from U+E000 to U+FFFF: UTF-8 puts
// the former last, UTF-16 first.
func compareNames(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	switch {
	case i == len(a) && i == len(b):
		return 0
	case i == len(a):
		return -1
	case i == len(b):
		return 1
	}
	// Back to the start of the character holding the first difference:
	// the names agree before it, so it decides.
	for i > 0 && !utf8.RuneStart(a[i]) {
		i--
	}
	ra, _ := utf8.DecodeRune(a[i:])
	rb, _ := utf8.DecodeRune(b[i:])
	ua, ub := firstUnit(ra), firstUnit(rb)
	switch {
	case ua < ub:
		return -1
	case ua > ub:
		return 1
	case ra < rb: // one high surrogate: the low ones keep code point order
		return -1
	default:
		return 1
	}
}

// firstUnit is the first UTF-16 code unit of r.
func firstUnit(r rune) rune {
	if r < 0x10000 {
		return r
	}
	return 0xd800 + (r-0x10000)>>10
}
