package jcs

import "strconv"

// appendNumber appends f as ECMAScript's Number.prototype.toString(10)
// writes it (ECMA-262, Number::toString; RFC 8785 section 3.2.2.3): the
// shortest digits that read back as f, placed by their decimal exponent.
// f must be finite: JSON has no NaN or Infinity, and the parser rejects
// what would round to them.
func appendNumber(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0') // -0 too
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// strconv's shortest form, d[.ddd]e±xx, gives the digits s (k of them)
	// and n, the position of the decimal point: f = 0.s × 10^n.
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	var digits [17]byte
	k, i := 0, 0
	for ; e[i] != 'e'; i++ {
		if e[i] != '.' {
			digits[k] = e[i]
			k++
		}
	}
	n := 1
	exp, neg := 0, e[i+1] == '-'
	for _, c := range e[i+2:] {
		exp = exp*10 + int(c-'0')
	}
	if neg {
		n -= exp
	} else {
		n += exp
	}
	s := digits[:k]
	switch {
	case k <= n && n <= 21: // an integer: the digits, then n-k zeros
		dst = append(dst, s...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21: // the point inside the digits
		dst = append(dst, s[:n]...)
		dst = append(dst, '.')
		dst = append(dst, s[n:]...)
	case -6 < n && n <= 0: // 0.000ddd, up to six zeros after the point
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, s...)
	default: // exponential: d[.ddd]e±x, the exponent without leading zeros
		dst = append(dst, s[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, s[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 < 0 {
			dst = append(dst, '-')
		} else {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(abs(n-1)), 10)
	}
	return dst
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// number reads the number at p.pos and writes it as ECMAScript would.
func (p *parser) number() *fault {
	start := p.pos
	if p.data[p.pos] == '-' {
		p.pos++
	}
	digits := func() int {
		n := 0
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	intStart := p.pos
	switch n := digits(); {
	case n == 0:
		return faultf(ErrSyntax, p.pos, "%s where a number needs a digit", quoteRune(p.data[p.pos:]))
	case n > 1 && p.data[intStart] == '0':
		return faultf(ErrSyntax, intStart, "a number with a leading zero")
	}
	integer := true
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return faultf(ErrSyntax, p.pos, "%s where a fraction needs a digit", quoteRune(p.data[p.pos:]))
		}
		integer = false
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return faultf(ErrSyntax, p.pos, "%s where an exponent needs a digit", quoteRune(p.data[p.pos:]))
		}
		integer = false
	}
	lit := p.data[start:p.pos]
	// An integer of up to 15 digits is exact in a double and ECMAScript
	// writes it as is, -0 aside.
	if integer && p.pos-intStart <= 15 {
		if p.pos-intStart == 1 && p.data[intStart] == '0' {
			lit = p.data[intStart:p.pos]
		}
		p.buf = append(p.buf, lit...)
		return nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil { // the grammar is checked, so only a range error is left
		return faultf(ErrNumberRange, start, "%s is beyond the range of a double (about ±1.8e308)", quoteDetail(lit))
	}
	p.buf = appendNumber(p.buf, f)
	return nil
}
