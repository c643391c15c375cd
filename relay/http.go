package relay

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/retry"
)

// Headers HTTPSender sets by default.
const (
	// DefaultKeyHeader carries the message's idempotency key (the IETF
	// draft's header, which idemhttp reads).
	DefaultKeyHeader = "Idempotency-Key"
	// DefaultFenceHeader carries the delivery's fencing token, in decimal.
	DefaultFenceHeader = "Oncekv-Fence"
)

// maxDrain bounds how much of a response body HTTPSender reads so that the
// connection can be reused; a longer body costs a new connection, not
// memory.
const maxDrain = 64 << 10

// HTTPOptions configures HTTPSender. nil means every default; a zero field
// takes its default.
type HTTPOptions struct {
	// Header is added to every request (authorization, Content-Type).
	// Default: Content-Type application/octet-stream only. It is copied
	// once, when HTTPSender is called.
	Header http.Header
	// KeyHeader names the header of the idempotency key. Default
	// DefaultKeyHeader.
	KeyHeader string
	// FenceHeader names the header of the fencing token. Default
	// DefaultFenceHeader.
	FenceHeader string
	// Now is the clock a Retry-After date is read against. Default
	// time.Now.
	Now func() time.Time
}

// HTTPSender returns a Sender that sends each message as one request:
// method (empty: POST) to url on client (nil: http.DefaultClient), the body being the
// message's body, the message's Key in the Idempotency-Key header (the
// same on every retry and redrive, never the token), and the delivery's
// fencing token in Oncekv-Fence. The response is classified by
// retry.HTTPStatus: 2xx is done; 408, 409 (the far side is still working
// on the key), 429 and 5xx are retried, not before their Retry-After; 400,
// 422 and every other status are permanent (dead letter). The error of a
// status that is not 2xx ends with what the far side said (the title and
// detail of a problem+json answer, else the start of its body; at most 256
// bytes), which Nack keeps as the message's LastError: a dead letter says
// why. Network errors are retried. A redirect that keeps the method and body (307, 308) is
// followed; one that would turn the request into a body-less GET (301,
// 302, 303) is a permanent ErrRedirect. A key that cannot travel as it is (a control character,
// spaces at its ends) is a permanent ErrInvalidKey, sent to nobody.
//
// Errors: ErrInvalidSender when method, url or a header of opts cannot
// make a request.
func HTTPSender(client *http.Client, method, rawURL string, opts *HTTPOptions) (Sender, error) {
	var o HTTPOptions
	if opts != nil {
		o = *opts
	}
	if client == nil {
		client = http.DefaultClient
	}
	client = keepBody(client)
	if method == "" {
		method = http.MethodPost
	}
	if !validToken(method) {
		return nil, fmt.Errorf("%w: method %q", ErrInvalidSender, method)
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: url %q must be absolute http or https", ErrInvalidSender, rawURL)
	}
	o.KeyHeader = http.CanonicalHeaderKey(cmp.Or(o.KeyHeader, DefaultKeyHeader))
	o.FenceHeader = http.CanonicalHeaderKey(cmp.Or(o.FenceHeader, DefaultFenceHeader))
	if !validToken(o.KeyHeader) || !validToken(o.FenceHeader) || o.KeyHeader == o.FenceHeader {
		return nil, fmt.Errorf("%w: header names %q and %q", ErrInvalidSender, o.KeyHeader, o.FenceHeader)
	}
	for name, values := range o.Header {
		for _, v := range values {
			if !validToken(name) || !noControl(v) {
				return nil, fmt.Errorf("%w: header %q: %q", ErrInvalidSender, clip(name), clip(v))
			}
		}
	}
	header := o.Header.Clone()
	if header == nil {
		header = http.Header{}
	}
	if header.Get("Content-Type") == "" {
		header.Set("Content-Type", "application/octet-stream")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return func(ctx context.Context, m *queue.Message) error {
		if err := CheckKey(m.Key); err != nil {
			return retry.Permanent(err)
		}
		req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(m.Body))
		if err != nil {
			return retry.Permanent(fmt.Errorf("%w: %w", ErrInvalidSender, err))
		}
		req.Header = header.Clone()
		req.Header.Set(o.KeyHeader, m.Key)
		req.Header.Set(o.FenceHeader, strconv.FormatUint(m.Token, 10))
		resp, err := client.Do(req)
		if errors.Is(err, ErrRedirect) {
			return retry.Permanent(err)
		}
		if err != nil {
			return err // transient: the request may or may not have arrived
		}
		defer resp.Body.Close()
		var body bytes.Buffer
		_, _ = io.Copy(&body, io.LimitReader(resp.Body, maxDrain))
		err = retry.HTTPStatus(resp.StatusCode, resp.Header, o.Now())
		if err == nil {
			return nil
		}
		if why := answerExcerpt(resp.Header, body.Bytes()); why != "" {
			err = fmt.Errorf("%w: %s", err, why)
		}
		return err
	}, nil
}

// maxExcerpt bounds what HTTPSender's error (and so a dead letter's
// LastError) repeats of the far side's answer.
const maxExcerpt = 256

// answerExcerpt is what an error answer said, for a person reading a dead
// letter: the title and detail of an RFC 9457 problem (idemhttp's, among
// others), else the start of the body; one line, valid UTF-8, at most
// maxExcerpt bytes; "(replayed)" in front when the answer is a stored one
// replayed by an idempotency layer (Idempotent-Replayed: true).
func answerExcerpt(h http.Header, body []byte) string {
	var why string
	var p struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(body, &p) == nil && (p.Title != "" || p.Detail != "") {
		why = p.Title
		if p.Detail != "" && p.Detail != p.Title {
			why = strings.TrimPrefix(why+": "+p.Detail, ": ")
		}
	} else {
		why = string(body[:min(len(body), 4*maxExcerpt)])
	}
	why = strings.Join(strings.FieldsFunc(strings.ToValidUTF8(why, "?"), func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r)
	}), " ")
	if len(why) > maxExcerpt {
		why = strings.ToValidUTF8(why[:maxExcerpt], "") + "…"
	}
	if why != "" && strings.EqualFold(h.Get("Idempotent-Replayed"), "true") {
		why = "(replayed) " + why
	}
	return why
}

// maxRedirects is net/http's own limit, which a CheckRedirect of ours
// replaces.
const maxRedirects = 10

// keepBody returns a copy of client (the Transport and Jar shared) that
// refuses a redirect changing the method: net/http follows a 301, 302 or
// 303 of a POST as a GET without the body, and a 2xx to that GET would
// ack a message the far side never got. 307 and 308 keep the method and
// body, and are followed as client's CheckRedirect says.
func keepBody(client *http.Client) *http.Client {
	c := *client
	check := client.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if first := via[0]; req.Method != first.Method {
			return fmt.Errorf("%w: %s %s answered %d, to %s %s", ErrRedirect,
				first.Method, first.URL.Redacted(), req.Response.StatusCode, req.Method, req.URL.Redacted())
		}
		if check != nil {
			return check(req, via)
		}
		if len(via) >= maxRedirects {
			return fmt.Errorf("stopped after %d redirects", maxRedirects)
		}
		return nil
	}
	return &c
}

// validToken reports whether s is an RFC 9110 token (a method or a header
// name).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c != 0 && c < 0x7f && bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0) {
			return false
		}
	}
	return true
}

// CheckKey returns nil if key can travel as HTTPSender's Idempotency-Key
// as it is, and otherwise an error matching ErrInvalidKey that quotes it.
// HTTPSender dead-letters a message whose key fails it; a producer calls
// it before EnqueueTx to refuse such a key at once instead.
func CheckKey(key string) error {
	if !validValue(key) {
		return fmt.Errorf("%w: %q", ErrInvalidKey, clip(key))
	}
	return nil
}

// validValue reports whether s can be a header value as it is: no control
// characters, and no spaces at its ends (which a server would trim, so
// the far side would see another key).
func validValue(s string) bool {
	if s == "" || s[0] == ' ' || s[0] == '\t' || s[len(s)-1] == ' ' || s[len(s)-1] == '\t' {
		return false
	}
	return noControl(s)
}

// noControl reports whether s has no control character but tab: what
// net/http's Transport accepts in a header value (it fails the request
// otherwise, which would look like a transient network error).
func noControl(s string) bool {
	for i := range len(s) {
		if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// clip bounds how much of a user's header an error message repeats.
func clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
