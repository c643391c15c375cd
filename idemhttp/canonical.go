package idemhttp

import (
	"bytes"
	"context"
	"io"
	"math"
	"mime"
	"net/http"
	"strings"

	"github.com/oncekv/oncekv/jcs"
)

// WrapCanonicalJSON is Wrap for JSON APIs: a request whose body is JSON
// (Content-Type application/json or a +json type) is fingerprinted by the
// body's canonical form (RFC 8785, see package jcs) instead of its bytes,
// so a client that retries with the same value serialised otherwise
// (members in another order, 1.0 for 1, "\u00e9" for "é", other
// whitespace) gets the first answer replayed, not 422, while a changed
// value is still 422. Method, path, query and Options.FingerprintHeaders
// count as with Wrap.
//
// The handler gets the body as the client sent it, never the canonical
// form. A body with no canonical form (not JSON, not I-JSON: a duplicate
// name, invalid UTF-8, a lone surrogate, a number out of range), or whose
// canonical form is over Options.MaxBodyBytes, is fingerprinted by its
// bytes, as Wrap does; no body of the one kind can match one of the
// other. Answers are Wrap's, in Wrap's order: the body is read only once
// the key and the caller are known (so a 401 reads none of it), and it
// is answered 413 over Options.MaxBodyBytes, 400 when it cannot be read.
//
// Switching from Wrap to WrapCanonicalJSON changes the fingerprint of
// every JSON body that was not canonical already: a retry of such a
// request that began before the switch gets 422 until its key expires.
// WrapCanonicalJSON panics as Wrap does.
func (m *Middleware) WrapCanonicalJSON(next http.Handler) http.Handler {
	if next == nil {
		panic("idemhttp: WrapCanonicalJSON of a nil handler")
	}
	key := canonicalBodyKey{m}
	wrapped := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, ok := r.Context().Value(key).(*canonicalBody); ok {
			r = r.WithContext(r.Context()) // a copy: the handler's request is its own
			switch {
			case b.r == nil: // passed through unread: the body as it came
				r.Body = b.src
			case b.sent != nil: // the middleware read the canonical form
				r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b.sent)), int64(len(b.sent))
			}
		}
		next.ServeHTTP(w, r)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.methods[r.Method] || r.Body == nil || r.Body == http.NoBody || !jsonMedia(r.Header.Get("Content-Type")) {
			wrapped.ServeHTTP(w, r)
			return
		}
		// The body is read only when the middleware reads it, after it
		// checked the key and the caller, as Wrap does.
		b := &canonicalBody{src: r.Body, limit: m.opts.MaxBodyBytes}
		r = r.WithContext(context.WithValue(r.Context(), key, b))
		r.Body = b
		wrapped.ServeHTTP(w, r)
	})
}

// canonicalBodyKey is the context key of a request's canonicalBody. It
// holds its Middleware so that two of them, one inside the other, keep
// theirs apart.
type canonicalBodyKey struct{ m *Middleware }

// canonicalBody is a request body that reads as the canonical form of the
// JSON in src, when it has one within limit bytes, and otherwise as src.
// It reads src on its first Read: until then r is nil.
type canonicalBody struct {
	src   io.ReadCloser
	limit int64
	r     io.Reader
	sent  []byte // the body as sent, when r gives its canonical form instead
}

func (b *canonicalBody) Read(p []byte) (int, error) {
	if b.r == nil {
		b.load()
	}
	return b.r.Read(p)
}

func (b *canonicalBody) Close() error { return b.src.Close() }

// load reads src, up to one byte past limit, and decides what r gives.
func (b *canonicalBody) load() {
	var buf bytes.Buffer
	_, err := buf.ReadFrom(io.LimitReader(b.src, min(b.limit, math.MaxInt64-1)+1))
	sent := buf.Bytes()
	switch {
	case err != nil: // the middleware gets the same error, and answers it
		b.r = io.MultiReader(bytes.NewReader(sent), failingReader{err})
		return
	case int64(len(sent)) > b.limit: // and the rest of the body, to find it too large
		b.r = io.MultiReader(bytes.NewReader(sent), b.src)
		return
	}
	canonical, err := jcs.Canonicalize(sent)
	if err != nil || int64(len(canonical)) > b.limit || bytes.Equal(canonical, sent) {
		b.r = bytes.NewReader(sent)
		return
	}
	b.r, b.sent = bytes.NewReader(canonical), sent
}

// jsonMedia reports whether the Content-Type value ct names JSON:
// application/json or a structured +json type (RFC 6839).
func jsonMedia(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// failingReader fails every read with err.
type failingReader struct{ err error }

func (f failingReader) Read([]byte) (int, error) { return 0, f.err }
