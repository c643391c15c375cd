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
