package dupproxy

import (
	"bytes"
	"net/http"
)

// kept is the first max bytes of a body.
type kept struct {
	max  int64
	body bytes.Buffer
	over bool // more came, and was dropped
}

func (k *kept) keep(b []byte) {
	if room := k.max - int64(k.body.Len()); int64(len(b)) > room {
		k.body.Write(b[:max(room, 0)])
		k.over = true
		return
	}
	k.body.Write(b)
}

// capture is the client's ResponseWriter with the answer noted on its
// way: everything is passed through as it is written, and the status,
// the headers and the first max bytes of the body are kept. It is read
// only once the ReverseProxy returned (done: it returned normally).
type capture struct {
	http.ResponseWriter
	kept
	status int
	header http.Header
	done   bool
}

func (c *capture) WriteHeader(status int) {
	if c.status == 0 && status >= 200 { // 1xx are informational
		c.status = status
		c.header = c.ResponseWriter.Header().Clone()
	}
	c.ResponseWriter.WriteHeader(status)
}

func (c *capture) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	c.keep(b)
	return c.ResponseWriter.Write(b)
}

// Flush passes a flush on (the ReverseProxy flushes streamed answers).
func (c *capture) Flush() { _ = http.NewResponseController(c.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the client's writer.
func (c *capture) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *capture) answer() *answer {
	status := c.status
	if status == 0 { // the ReverseProxy wrote nothing: the client got 200 and no body
		status = http.StatusOK
	}
	return &answer{status: status, header: c.header, body: c.body.Bytes(), over: c.over}
}

// recorder is the ResponseWriter of a copy: it keeps the status, the
// headers and the first max bytes of the body, and drops the rest.
type recorder struct {
	kept
	header http.Header
	status int
	sent   http.Header
	err    error // set by the ReverseProxy's ErrorHandler
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 && status >= 200 {
		r.status = status
		r.sent = r.header.Clone()
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	r.keep(b)
	return len(b), nil
}

// Flush does nothing: the copy's answer goes nowhere.
func (r *recorder) Flush() {}

func (r *recorder) answer() *answer {
	if r.err != nil {
		return &answer{err: r.err}
	}
	status := r.status
	if status == 0 {
		status = http.StatusOK
	}
	return &answer{status: status, header: r.sent, body: r.body.Bytes(), over: r.over}
}
