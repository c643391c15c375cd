package jcs

import "unicode/utf8"

// str reads the string at p.pos (its opening quote) and appends its
// canonical form (RFC 8785 section 3.2.2.2) to p.buf: every character as
// itself except '"', '\' and U+0000 to U+001F, which are escaped, the
// latter as \b, \t, \n, \f, \r or \u00xx. The form is one to one, so
// names are compared and sorted in it (order.go).
func (p *parser) str() *fault {
	start := p.pos
	p.pos++
	p.buf = append(p.buf, '"')
	run := p.pos // start of the characters not yet copied
	for p.pos < len(p.data) {
		switch c := p.data[p.pos]; {
		case c == '"':
			p.buf = append(p.buf, p.data[run:p.pos]...)
			p.pos++
			p.buf = append(p.buf, '"')
			return nil
		case c == '\\':
			p.buf = append(p.buf, p.data[run:p.pos]...)
			r, f := p.escape()
			if f != nil {
				return f
			}
			p.buf = appendStringRune(p.buf, r)
			run = p.pos
		case c < 0x20:
			return faultf(ErrSyntax, p.pos, "the control character U+%04X unescaped in a string", c)
		case c < utf8.RuneSelf:
			p.pos++
		default:
			r, size := utf8.DecodeRune(p.data[p.pos:])
			if r == utf8.RuneError && size == 1 {
				return faultf(ErrInvalidUTF8, p.pos, "the byte 0x%02x in a string", p.data[p.pos])
			}
			p.pos += size
		}
	}
	return faultf(ErrSyntax, start, "a string that never ends")
}

// escape reads the escape sequence at p.pos (its backslash) and returns
// the character it stands for; a surrogate pair, two \u escapes, is one.
func (p *parser) escape() (rune, *fault) {
	at := p.pos
	p.pos++
	if p.pos >= len(p.data) {
		return 0, faultf(ErrSyntax, at, "an escape that never ends")
	}
	c := p.data[p.pos]
	p.pos++
	switch c {
	case '"', '\\', '/':
		return rune(c), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
	default:
		return 0, faultf(ErrSyntax, at, "the unknown escape \\%s", quoteRune(p.data[at+1:]))
	}
	r, f := p.hex4(at)
	switch {
	case f != nil:
		return 0, f
	case r >= 0xdc00 && r <= 0xdfff:
		return 0, faultf(ErrLoneSurrogate, at, "\\u%04x, a low surrogate with no high one before it", r)
	case r < 0xd800 || r > 0xdbff:
		return r, nil
	}
	if p.pos+1 >= len(p.data) || p.data[p.pos] != '\\' || p.data[p.pos+1] != 'u' {
		return 0, faultf(ErrLoneSurrogate, at, "\\u%04x, a high surrogate with no \\u escape of a low one after it", r)
	}
	low, f := p.hex4(p.pos)
	if f != nil {
		return 0, f
	}
	if low < 0xdc00 || low > 0xdfff {
		return 0, faultf(ErrLoneSurrogate, at, "\\u%04x, a high surrogate followed by \\u%04x, not a low one", r, low)
	}
	return 0x10000 + (r-0xd800)<<10 + (low - 0xdc00), nil
}

// hex4 reads the four hex digits of the \u escape whose backslash is at
// offset at, and leaves p.pos after them.
func (p *parser) hex4(at int) (rune, *fault) {
	var r rune
	for i := at + 2; i < at+6; i++ {
		if i >= len(p.data) {
			return 0, faultf(ErrSyntax, at, "a \\u escape cut short")
		}
		c := p.data[i]
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, faultf(ErrSyntax, i, "%s where a \\u escape needs a hex digit", quoteRune(p.data[i:]))
		}
		r = r<<4 | rune(v)
	}
	p.pos = at + 6
	return r, nil
}

// appendStringRune appends r as a canonical string writes it.
func appendStringRune(dst []byte, r rune) []byte {
	switch {
	case r == '"':
		return append(dst, '\\', '"')
	case r == '\\':
		return append(dst, '\\', '\\')
	case r < 0x20:
		return append(dst, controlEscape(byte(r))...)
	}
	return utf8.AppendRune(dst, r)
}

// controlEscape is how RFC 8785 (and ECMAScript's JSON.stringify) escapes
// the control character c, below U+0020: the short form where JSON has
// one, else \u00xx in lowercase hex.
func controlEscape(c byte) string {
	switch c {
	case '\b':
		return `\b`
	case '\t':
		return `\t`
	case '\n':
		return `\n`
	case '\f':
		return `\f`
	case '\r':
		return `\r`
	}
	const hex = "0123456789abcdef"
	return string([]byte{'\\', 'u', '0', '0', hex[c>>4], hex[c&0xf]})
}

// quoteRune quotes the character at the start of b for an error's detail.
func quoteRune(b []byte) string {
	if len(b) == 0 {
		return "the end"
	}
	_, size := utf8.DecodeRune(b)
	return quoteDetail(b[:size])
}
