package idemhttp

import (
	"net/http"
	"time"
)

// The header fields of the middleware's contract with its clients. The
// IETF draft defines only the request field, Idempotency-Key, and leaves
// the key's expiry to the server's documentation; the response fields are
// this package's (Idempotent-Replayed is the name Stripe's clients read).
const (
	// HeaderKey is the request field carrying the idempotency key, bare or
	// as a structured-field string ("...").
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is "true" on a response replayed from the store: the
	// handler did not run for this request.
	HeaderReplayed = "Idempotent-Replayed"
	// HeaderReplayBodyOmitted is "true" on a replay of a response whose
	// body passed Options.MaxRecordBytes: the status and headers are the
	// first answer's, the body is empty.
	HeaderReplayBodyOmitted = "Idempotent-Replay-Body-Omitted"
	// HeaderKeyExpires is an HTTP-date (RFC 9110 section 5.6.7), on a
	// stored first answer and on every replay: until then, a retry with
	// the same key and request gets this answer back; after it the key
	// may be forgotten at any time, and a retry may run the handler again.
	// It is the key's first-seen time on the store's clock plus the
	// store's oncekv.Options.Retention, rounded down to the second, so it
	// is the same on every replay. A response not stored (5xx, DoNotStore)
	// and one that streamed before its commit (a Flush, or a body over
	// Options.MaxRecordBytes: the header had gone already) carry none.
	HeaderKeyExpires = "Idempotency-Key-Expires"
	// HeaderRetryAfter is on every 409: the whole seconds, at least 1,
	// until the running request's lease ends.
	HeaderRetryAfter = "Retry-After"
)

// keyExpires is the HeaderKeyExpires value of a key first seen at
// firstSeen, and false when the store gave no first-seen time.
func (m *Middleware) keyExpires(firstSeen time.Time) (string, bool) {
	if firstSeen.IsZero() {
		return "", false
	}
	// Formatting truncates to the second: the date never promises more
	// than the store keeps.
	return firstSeen.Add(m.retention).UTC().Format(http.TimeFormat), true
}

// setKeyExpires adds HeaderKeyExpires to h for a key first seen at
// firstSeen.
func (m *Middleware) setKeyExpires(h http.Header, firstSeen time.Time) {
	if v, ok := m.keyExpires(firstSeen); ok {
		h.Set(HeaderKeyExpires, v)
	}
}

// announceStored adds HeaderKeyExpires to a stored first answer about to
// be sent; one that has streamed already is past adding headers to.
func (m *Middleware) announceStored(rec *recorder, firstSeen time.Time) {
	if !rec.sent {
		m.setKeyExpires(rec.w.Header(), firstSeen)
	}
}
