package idemhttp

import (
	"net/http"
	"net/textproto"
	"slices"
	"strings"
)

// recorder is the ResponseWriter a claimed request's handler writes to.
//
// A response to be stored is held back in the record buffer (the body
// appended in place, see record.go) until it has committed, so the client
// never sees an answer the store could still lose. A Flush, or a body over
// the cap, sends what is held and streams the rest. A response not to be
// stored (5xx by default) goes straight through.
type recorder struct {
	w   http.ResponseWriter
	m   *Middleware
	buf []byte // the record: prefix, then the body so far (just the prefix once omitted)

	status  int
	decided bool // the status is known
	pass    bool // not stored: everything goes straight to w
	sent    bool // the status and headers are on their way to the client
	omitted bool // the body passed the cap and is not recorded
	headers []header
	bodyLen int // set by record
	// outer is the header map as the handler found it (what outer
	// middlewares set), restored when the handler's response is dropped.
	outer http.Header
}

func newRecorder(w http.ResponseWriter, m *Middleware) *recorder {
	return &recorder{w: w, m: m, buf: make([]byte, recordPrefix, recordPrefix+512), outer: w.Header().Clone()}
}

// dropHeaders undoes the handler's header changes, for an answer that
// replaces its response: a response never given must not leak its
// Location, ETag or Set-Cookie into the error that stands for it.
func (rc *recorder) dropHeaders() {
	h := rc.w.Header()
	clear(h)
	for name, values := range rc.outer {
		h[name] = values
	}
}

// Header returns the response's header map. The handler writes into the
// real one: nothing is copied.
func (rc *recorder) Header() http.Header { return rc.w.Header() }

// WriteHeader decides the status; as with net/http, later calls do nothing.
func (rc *recorder) WriteHeader(code int) {
	switch {
	case code < 100 || code > 999:
		// net/http panics on these; let it, on the handler's call, rather
		// than store a status no replay could send.
		rc.w.WriteHeader(code)
		return
	case code < 200:
		rc.w.WriteHeader(code) // informational: passed on, never stored
		return
	case rc.decided:
		return
	}
	rc.status, rc.decided = code, true
	if !rc.m.opts.Store(code) {
		rc.pass, rc.sent = true, true
		rc.w.WriteHeader(code)
	}
}

// decide takes the implicit 200 of a handler that wrote nothing.
func (rc *recorder) decide() {
	if !rc.decided {
		rc.WriteHeader(http.StatusOK)
	}
}

// Write appends p to the record, and sends it too once streaming.
func (rc *recorder) Write(p []byte) (int, error) {
	rc.decide()
	switch {
	case rc.pass || rc.omitted:
		return rc.w.Write(p)
	case len(rc.buf)-recordPrefix+len(p) > rc.m.opts.MaxRecordBytes:
		// Over the cap: send what is held and stream the rest, keeping no
		// body (see the package doc).
		if err := rc.sendHeld(); err != nil {
			return 0, err
		}
		rc.omitted = true
		rc.buf = slices.Clip(rc.buf[:recordPrefix])
		return rc.w.Write(p)
	}
	rc.buf = append(rc.buf, p...)
	if rc.sent {
		return rc.w.Write(p)
	}
	return len(p), nil
}

// Flush sends what is held and flushes it to the client; the rest of the
// response streams (see the package doc).
func (rc *recorder) Flush() { _ = rc.FlushError() }

// FlushError is Flush with its error, for http.ResponseController.
func (rc *recorder) FlushError() error {
	rc.decide()
	if err := rc.sendHeld(); err != nil {
		return err
	}
	return http.NewResponseController(rc.w).Flush()
}

// sendHeld sends the status, the headers and the body held so far, once.
func (rc *recorder) sendHeld() error {
	if rc.sent {
		return nil
	}
	rc.sent = true
	rc.headers = rc.snapshotHeaders() // what the client gets is what replays get
	rc.w.WriteHeader(rc.status)
	_, err := rc.w.Write(rc.buf[recordPrefix:])
	return err
}

// snapshotHeaders copies the allowlisted response headers, each value as
// net/http sends it (see sentValue).
func (rc *recorder) snapshotHeaders() []header {
	var hs []header
	for name, values := range rc.w.Header() {
		if !rc.m.replay[name] {
			continue
		}
		for _, v := range values {
			if v, ok := sentValue(v); ok {
				hs = append(hs, header{name, v})
			}
		}
	}
	// Map order is random; a fixed order keeps records of equal responses
	// equal.
	slices.SortStableFunc(hs, func(a, b header) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	return hs
}

// sentValue is v as net/http's server writes a header value: each
// newline or carriage return a space, spaces and tabs at the ends trimmed.
// The record keeps that, what the first client got, so that a handler's
// raw value (a Location built from user input) cannot make a record no
// replay can decode. A value still holding a NUL byte, which no client
// parses, is not kept (ok false): replays go without it.
func sentValue(v string) (string, bool) {
	v = textproto.TrimString(strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, v))
	return v, !strings.ContainsRune(v, 0)
}

// record completes the record of a decided, stored response.
func (rc *recorder) record() []byte {
	if !rc.sent {
		rc.headers = rc.snapshotHeaders()
	}
	rc.bodyLen = len(rc.buf) - recordPrefix
	setPrefix(rc.buf, rc.status, rc.bodyLen, rc.omitted)
	rc.buf = appendHeaders(rc.buf, rc.headers)
	return rc.buf
}

// send sends a committed response that was held back.
func (rc *recorder) send() {
	if rc.sent {
		return
	}
	rc.sent = true
	rc.w.WriteHeader(rc.status)
	_, _ = rc.w.Write(rc.buf[recordPrefix : recordPrefix+rc.bodyLen]) // a client gone now has its answer stored
}
