package idemhttp

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// errBadKey: the Idempotency-Key header is malformed.
var errBadKey = errors.New("oncekv: idemhttp: malformed Idempotency-Key")

// parseKey returns the request's Idempotency-Key and whether it had one.
// The draft defines the value as a structured-field string ("..."); many
// clients (Stripe's among them) send it bare. Both are accepted, and name
// the same key. The key must be printable ASCII, 1 to MaxKeyLen bytes.
func parseKey(h http.Header) (string, bool, error) {
	values := h.Values("Idempotency-Key")
	switch len(values) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", true, fmt.Errorf("%w: the header is given %d times", errBadKey, len(values))
	}
	v := strings.TrimSpace(values[0])
	if strings.HasPrefix(v, `"`) {
		var err error
		if v, err = unquote(v); err != nil {
			return "", true, err
		}
	}
	switch {
	case v == "":
		return "", true, fmt.Errorf("%w: empty", errBadKey)
	case len(v) > MaxKeyLen:
		return "", true, fmt.Errorf("%w: %d bytes, over %d", errBadKey, len(v), MaxKeyLen)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return "", true, fmt.Errorf("%w: byte %#x at %d is not printable ASCII", errBadKey, v[i], i)
		}
	}
	return v, true, nil
}

// unquote decodes a structured-field string (RFC 9651 section 3.3.3):
// quoted, with \" and \\ the only escapes.
func unquote(v string) (string, error) {
	if len(v) < 2 || v[len(v)-1] != '"' {
		return "", fmt.Errorf("%w: unterminated quoted string", errBadKey)
	}
	inner := v[1 : len(v)-1]
	var b strings.Builder
	for i := 0; i < len(inner); i++ {
		c := inner[i]
		switch {
		case c == '\\':
			i++
			if i == len(inner) || (inner[i] != '"' && inner[i] != '\\') {
				return "", fmt.Errorf("%w: bad escape in quoted string", errBadKey)
			}
			b.WriteByte(inner[i])
		case c == '"':
			return "", fmt.Errorf("%w: stray quote in quoted string", errBadKey)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}
