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
// other. Answers are Wrap's (413 for a body over Options.MaxBodyBytes,
// 400 for one that cannot be read).
//
// Switching from Wrap to WrapCanonicalJSON changes the fingerprint of
// every JSON body that was not canonical already: a retry of such a
// request that began before the switch gets 422 until its key expires.
// WrapCanonicalJSON panics as Wrap does.
func (m *Middleware) WrapCanonicalJSON(next http.Handler) http.Handler {
	if next == nil {
		panic("idemhttp: WrapCanonicalJSON of a nil handler")
	}
	key := sentBodyKey{m}
	wrapped := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sent, ok := r.Context().Value(key).([]byte); ok {
			r = r.WithContext(r.Context()) // a copy: the handler's request is its own
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(sent)), int64(len(sent))
		}
		next.ServeHTTP(w, r)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.methods[r.Method] || r.Header.Get("Idempotency-Key") == "" || !jsonMedia(r.Header.Get("Content-Type")) ||
			r.ContentLength > m.opts.MaxBodyBytes || r.Body == nil || r.Body == http.NoBody {
			wrapped.ServeHTTP(w, r) // Wrap decides, on the bytes as they are
			return
		}
		var buf bytes.Buffer
		_, err := buf.ReadFrom(io.LimitReader(r.Body, min(m.opts.MaxBodyBytes, math.MaxInt64-1)+1))
		sent := buf.Bytes()
		r = r.WithContext(r.Context())
		switch canonical, cerr := jcs.Canonicalize(sent); {
		case err != nil, int64(len(sent)) > m.opts.MaxBodyBytes:
			// Wrap answers it, reading what was read and then the rest,
			// or the same error.
			rest := r.Body
			if err != nil {
				rest = io.NopCloser(failingReader{err})
			}
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(sent), rest), r.Body}
		case cerr != nil, int64(len(canonical)) > m.opts.MaxBodyBytes, bytes.Equal(canonical, sent):
			r.Body = io.NopCloser(bytes.NewReader(sent))
		default:
			r = r.WithContext(context.WithValue(r.Context(), key, sent))
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(canonical)), int64(len(canonical))
		}
		wrapped.ServeHTTP(w, r)
	})
}

// sentBodyKey is the context key under which WrapCanonicalJSON keeps, for
// the handler, the body as it was sent while the middleware reads its
// canonical form. It holds its Middleware so that two of them, one inside
// the other, keep theirs apart.
type sentBodyKey struct{ m *Middleware }

// jsonMedia reports whether the Content-Type value ct names JSON:
// application/json or a structured +json type (RFC 6839).
func jsonMedia(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// failingReader fails every read with err.
type failingReader struct{ err error }

func (f failingReader) Read([]byte) (int, error) { return 0, f.err }
