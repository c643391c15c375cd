package retry

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ParseRetryAfter parses the value of an HTTP Retry-After header (RFC 9110,
// section 10.2.3) into how long to wait from now. Both forms are accepted:
// delta-seconds ("120") and an HTTP-date ("Fri, 31 Dec 1999 23:59:59 GMT",
// and the two obsolete date formats http.ParseTime reads), with spaces
// around the value ignored.
//
// A date at or before now means the server's wait is already over: 0, no
// floor. A date far in the future gives a long duration (at most the
// largest time.Duration); Policy.MaxRetryAfter caps what is honoured.
// Anything else is an error matching ErrRetryAfter: an empty value, a sign
// ("-5", "+5"), a fraction ("1.5"), seconds too many for a time.Duration,
// or text that is no date.
func ParseRetryAfter(value string, now time.Time) (time.Duration, error) {
	v := strings.TrimSpace(value)
	if v == "" {
		return 0, fmt.Errorf("%w: empty value", ErrRetryAfter)
	}
	if isDigits(v) {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n > math.MaxInt64/uint64(time.Second) {
			return 0, fmt.Errorf("%w: %s seconds is out of range", ErrRetryAfter, clip(v))
		}
		return time.Duration(n) * time.Second, nil
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is neither delta-seconds nor an HTTP-date", ErrRetryAfter, clip(v))
	}
	// Sub saturates instead of overflowing for dates centuries away.
	return max(t.Sub(now), 0), nil
}

func isDigits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// clip bounds how much of a server's header an error message repeats.
func clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// StatusError is an HTTP response that was not a success.
type StatusError struct {
	Code int // the status code
}

// Error implements error.
func (e *StatusError) Error() string {
	if text := http.StatusText(e.Code); text != "" {
		return fmt.Sprintf("oncekv: http status %d %s", e.Code, text)
	}
	return fmt.Sprintf("oncekv: http status %d", e.Code)
}

// HTTPStatus classifies an HTTP response for a sender, following the
// article: it returns nil for 2xx (done); a transient *StatusError for 408
// (the request timed out), 409 (the far side is still working on this
// idempotency key), 429 and 5xx, carrying the header's Retry-After (see
// After) when it has a valid one; and a *StatusError wrapped with Permanent
// for every other code: 400, 403, 422 and the rest of 4xx will not pass on
// a second try, and a 1xx or 3xx as a final answer means a misconfigured
// sender. A Retry-After that does not parse is ignored (the backoff alone
// then applies); now is the time the response arrived, for an HTTP-date.
//
// Network errors need no helper: any error not marked permanent is
// transient, so a sender returns client.Do's error as it is.
func HTTPStatus(code int, header http.Header, now time.Time) error {
	switch {
	case code >= 200 && code <= 299:
		return nil
	case code == http.StatusRequestTimeout, code == http.StatusConflict,
		code == http.StatusTooManyRequests, code >= 500 && code <= 599:
		err := error(&StatusError{Code: code})
		if v := header.Get("Retry-After"); v != "" {
			if d, perr := ParseRetryAfter(v, now); perr == nil {
				err = After(d, err)
			}
		}
		return err
	default:
		return Permanent(&StatusError{Code: code})
	}
}
