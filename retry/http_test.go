package retry_test

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/retry"
)

var responseTime = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func TestParseRetryAfterAcceptsBothForms(t *testing.T) {
	cases := []struct {
		value string
		want  time.Duration
	}{
		{"120", 120 * time.Second},
		{"0", 0},
		{" 7 ", 7 * time.Second},
		{"00012", 12 * time.Second},
		{"9223372036", 9223372036 * time.Second}, // the most a Duration holds
		// IMF-fixdate, the form servers must send.
		{"Mon, 30 Nov 2026 12:00:30 GMT", 30 * time.Second},
		{responseTime.Add(90 * time.Minute).Format(http.TimeFormat), 90 * time.Minute},
		// The two obsolete forms a recipient must still accept.
		{"Monday, 30-Nov-26 12:01:00 GMT", time.Minute},
		{"Mon Nov 30 12:00:05 2026", 5 * time.Second},
		// A date at or before now: the wait is over.
		{"Mon, 30 Nov 2026 12:00:00 GMT", 0},
		{"Sun, 29 Nov 2026 12:00:00 GMT", 0},
		{"Thu, 01 Jan 1970 00:00:00 GMT", 0},
		// Far future: saturates instead of overflowing.
		{"Fri, 31 Dec 9999 23:59:59 GMT", math.MaxInt64},
	}
	for _, c := range cases {
		t.Run(c.value, func(t *testing.T) {
			d, err := retry.ParseRetryAfter(c.value, responseTime)
			require.NoError(t, err)
			require.Equal(t, c.want, d)
		})
	}
}

func TestParseRetryAfterRejectsGarbage(t *testing.T) {
	for _, value := range []string{
		"", "   ", "-5", "+5", "1.5", "5s", "1e3", "0x10", "abc", "12 34",
		"9223372037",           // one second more than a Duration holds
		"18446744073709551616", // more than a uint64
		"99999999999999999999999999999",
		"Mon, 30 Nov 2026 25:00:00 GMT", "Mon, 30 Nov 2026", "tomorrow",
		strings.Repeat("9", 5000) + "x",
	} {
		t.Run(value[:min(len(value), 30)], func(t *testing.T) {
			d, err := retry.ParseRetryAfter(value, responseTime)
			require.ErrorIs(t, err, retry.ErrRetryAfter)
			require.Zero(t, d)
			require.True(t, strings.HasPrefix(err.Error(), "oncekv: invalid Retry-After: "), err.Error())
			require.Less(t, len(err.Error()), 200, "the message does not repeat a huge header")
		})
	}
	_, err := retry.ParseRetryAfter("9223372037", responseTime)
	require.ErrorContains(t, err, "9223372037 seconds is out of range")
	_, err = retry.ParseRetryAfter("tomorrow", responseTime)
	require.ErrorContains(t, err, `"tomorrow" is neither delta-seconds nor an HTTP-date`)
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, seed := range []string{"120", "0", " 7 ", "-1", "1.5", "Mon, 30 Nov 2026 12:00:30 GMT",
		"Monday, 30-Nov-26 12:01:00 GMT", "Mon Nov 30 12:00:05 2026", "9223372036", "9223372037", ""} {
		f.Add(seed, int64(1_796_040_000))
	}
	f.Fuzz(func(t *testing.T, value string, nowUnix int64) {
		now := time.Unix(nowUnix, 0)
		d, err := retry.ParseRetryAfter(value, now)
		if err != nil {
			require.ErrorIs(t, err, retry.ErrRetryAfter)
			require.Zero(t, d)
			return
		}
		require.GreaterOrEqual(t, d, time.Duration(0))
		v := strings.TrimSpace(value)
		if n, perr := strconv.ParseUint(v, 10, 64); perr == nil && !strings.HasPrefix(v, "+") {
			require.Equal(t, time.Duration(n)*time.Second, d, "delta-seconds are exact")
		}
		// Round trip through the seconds form.
		secs := int64(d / time.Second)
		d2, err := retry.ParseRetryAfter(strconv.FormatInt(secs, 10), now)
		require.NoError(t, err)
		require.Equal(t, time.Duration(secs)*time.Second, d2)
	})
}

func TestHTTPStatusClassifies(t *testing.T) {
	for code := 100; code <= 699; code++ {
		err := retry.HTTPStatus(code, nil, responseTime)
		switch {
		case code >= 200 && code <= 299:
			require.NoError(t, err, "%d", code)
			continue
		case code == 408 || code == 409 || code == 429 || code >= 500 && code <= 599:
			require.False(t, retry.IsPermanent(err), "%d retries", code)
		default:
			require.True(t, retry.IsPermanent(err), "%d is permanent", code)
		}
		var se *retry.StatusError
		require.ErrorAs(t, err, &se)
		require.Equal(t, code, se.Code)
		require.True(t, strings.HasPrefix(err.Error(), "oncekv: http status "+strconv.Itoa(code)), err.Error())
		_, ok := retry.RetryAfter(err)
		require.False(t, ok, "no header, no Retry-After")
	}
	require.EqualError(t, retry.HTTPStatus(503, nil, responseTime), "oncekv: http status 503 Service Unavailable")
	require.EqualError(t, retry.HTTPStatus(599, nil, responseTime), "oncekv: http status 599")
	for _, code := range []int{400, 403, 404, 422} {
		require.True(t, retry.IsPermanent(retry.HTTPStatus(code, nil, responseTime)), "the article's list: %d", code)
	}
	// Out of range codes are permanent too, not a panic.
	for _, code := range []int{-1, 0, 99, 700, math.MaxInt} {
		require.True(t, retry.IsPermanent(retry.HTTPStatus(code, nil, responseTime)))
	}
}

func TestHTTPStatusHonoursRetryAfter(t *testing.T) {
	header := func(v string) http.Header { return http.Header{"Retry-After": {v}} }
	cases := []struct {
		code   int
		value  string
		want   time.Duration
		hasOne bool
	}{
		{503, "120", 120 * time.Second, true},
		{429, "Mon, 30 Nov 2026 12:02:00 GMT", 2 * time.Minute, true},
		{408, "3", 3 * time.Second, true},
		{409, "1", time.Second, true},
		{503, "Sun, 29 Nov 2026 12:00:00 GMT", 0, true}, // past: no floor
		{503, "soon", 0, false},                         // garbage is ignored
		{503, "-5", 0, false},
		{503, "99999999999999", 0, false}, // overflow is ignored
	}
	for _, c := range cases {
		err := retry.HTTPStatus(c.code, header(c.value), responseTime)
		require.False(t, retry.IsPermanent(err))
		d, ok := retry.RetryAfter(err)
		require.Equal(t, c.hasOne, ok, "%d %q", c.code, c.value)
		require.Equal(t, c.want, d, "%d %q", c.code, c.value)
		var se *retry.StatusError
		require.ErrorAs(t, err, &se)
	}
	require.NoError(t, retry.HTTPStatus(200, header("120"), responseTime))
}

// A sender's whole path: status or network error in, decision out.
func TestHTTPFailuresThroughDecide(t *testing.T) {
	r := newRetrier(t, 3, retry.Policy{})
	ctx := context.Background()
	huge := http.Header{"Retry-After": {"31536000"}} // a year
	cases := []struct {
		name string
		err  error
		want retry.Reason
		min  time.Duration
	}{
		{"503 with Retry-After", retry.HTTPStatus(503, http.Header{"Retry-After": {"120"}}, responseTime), retry.ReasonRetry, 120 * time.Second},
		{"429 with a year", retry.HTTPStatus(429, huge, responseTime), retry.ReasonRetry, time.Hour},
		{"422", retry.HTTPStatus(422, nil, responseTime), retry.ReasonPermanent, 0},
		{"network", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, retry.ReasonRetry, 0},
		{"timeout of the attempt", context.DeadlineExceeded, retry.ReasonRetry, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := r.Decide(ctx, 1, c.err, responseTime)
			require.Equal(t, c.want, d.Reason)
			require.GreaterOrEqual(t, d.Delay, c.min)
			if c.name == "429 with a year" {
				require.Equal(t, time.Hour, d.Delay, "capped by MaxRetryAfter")
			}
		})
	}
}
