package idemhttp_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/idemhttptest"
)

// bodySeer is a handler that keeps every body it was handed, with its
// declared length, and answers 201 with the run's number.
type bodySeer struct {
	mu     sync.Mutex
	bodies []string
	idemhttptest.Counter
}

func (b *bodySeer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	b.mu.Lock()
	b.bodies = append(b.bodies, string(body))
	b.mu.Unlock()
	if r.ContentLength != int64(len(body)) {
		http.Error(w, "Content-Length does not match the body", http.StatusInternalServerError)
		return
	}
	b.Counter.ServeHTTP(w, r)
}

func (b *bodySeer) seen() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.bodies...)
}

// serveCanonical starts a real server with h behind WrapCanonicalJSON.
func serveCanonical(t *testing.T, opts *idemhttp.Options, h http.Handler) *httptest.Server {
	t.Helper()
	o := idemhttp.Options{Scope: idemhttptest.UserScope}
	if opts != nil {
		o = *opts
		o.Scope = idemhttptest.UserScope
	}
	mw, err := idemhttp.New(openDB(t, idemhttptest.NewClock().Now, nil), &o)
	require.NoError(t, err)
	srv := httptest.NewServer(mw.WrapCanonicalJSON(h))
	t.Cleanup(srv.Close)
	return srv
}

var jsonHeader = http.Header{"Content-Type": {"application/json; charset=utf-8"}}

// TestCanonicalJSONReplaysReserialisedBodies: behind WrapCanonicalJSON, a
// retry whose JSON body is the first one's value serialised otherwise (key
// order, 1.0 for 1, escaped for raw characters, whitespace) is replayed,
// where Wrap answers 422; a changed value is 422 with either; the handler
// reads the body as it was sent.
func TestCanonicalJSONReplaysReserialisedBodies(t *testing.T) {
	first := `{"amount":1,"currency":"EUR","payee":"José","tags":["a","b"]}`
	reserialised := []string{
		`{"currency":"EUR","amount":1,"payee":"José","tags":["a","b"]}`,      // member order
		`{"amount":1.0,"currency":"EUR","payee":"José","tags":["a","b"]}`,    // 1.0 for 1
		`{"amount":1,"currency":"EUR","payee":"Jos\u00e9","tags":["a","b"]}`, // escaped é
		`{"amount":1e0,"currency":"\u0045UR","payee":"Jos\u00E9","tags":["a","b"]}`,
		"{\n  \"tags\": [\"a\", \"b\"],\n  \"payee\": \"José\",\n  \"amount\": 10E-1,\n  \"currency\": \"EUR\"\n}\n",
	}
	changed := []string{
		`{"amount":2,"currency":"EUR","payee":"José","tags":["a","b"]}`,   // another amount
		`{"amount":"1","currency":"EUR","payee":"José","tags":["a","b"]}`, // 1 as a string
		`{"amount":1,"currency":"EUR","payee":"José","tags":["b","a"]}`,   // array order
		`{"amount":1,"currency":"EUR","payee":"Jose","tags":["a","b"]}`,   // another name
		`{"amount":1,"currency":"EUR","payee":"José"}`,                    // a member less
	}
	for _, canonicalOn := range []bool{true, false} {
		h := &bodySeer{}
		var srv *httptest.Server
		if canonicalOn {
			srv = serveCanonical(t, nil, h)
		} else {
			srv = serve(t, openDB(t, idemhttptest.NewClock().Now, nil), nil, h)
		}
		c := idemhttptest.Call{Key: "k-1", User: "alice", Header: jsonHeader, Body: []byte(first)}
		rep := idemhttptest.Send(t, srv, c)
		require.Equal(t, http.StatusCreated, rep.Status)
		require.Equal(t, "run 1 for alice", string(rep.Body))

		for _, body := range reserialised {
			c.Body = []byte(body)
			rep := idemhttptest.Send(t, srv, c)
			if !canonicalOn {
				typ, _ := idemhttptest.ProblemOf(t, rep)
				require.Equal(t, idemhttp.ProblemKeyReuse, typ, "Wrap compares bytes: %s", body)
				continue
			}
			require.Equal(t, http.StatusCreated, rep.Status, body)
			require.True(t, rep.Replayed(), body)
			require.Equal(t, "run 1 for alice", string(rep.Body), body)
		}
		for _, body := range changed {
			c.Body = []byte(body)
			rep := idemhttptest.Send(t, srv, c)
			require.Equal(t, http.StatusUnprocessableEntity, rep.Status, body)
			typ, _ := idemhttptest.ProblemOf(t, rep)
			require.Equal(t, idemhttp.ProblemKeyReuse, typ, body)
		}
		require.Equal(t, int64(1), h.Runs.Load(), "the handler ran once")
		require.Equal(t, []string{first}, h.seen(), "the handler read the body as sent")
	}
}

// TestCanonicalJSONHandlerGetsTheBodyAsSent: the handler reads the client's
// bytes, with their length, when the canonical form differs from them.
func TestCanonicalJSONHandlerGetsTheBodyAsSent(t *testing.T) {
	h := &bodySeer{}
	srv := serveCanonical(t, nil, h)
	sent := "{ \"b\": 1.50, \"a\": \"\\u00e9\" }\n"
	rep := idemhttptest.Send(t, srv, idemhttptest.Call{Key: "k-2", User: "bob", Header: jsonHeader, Body: []byte(sent)})
	require.Equal(t, http.StatusCreated, rep.Status, string(rep.Body))
	require.Equal(t, []string{sent}, h.seen())
}

// TestCanonicalJSONFallsBackToBytes: a body with no canonical form, a body
// that is not declared JSON, and one whose canonical form would be over
// MaxBodyBytes, are compared by their bytes: the same bytes replay,
// others are 422.
func TestCanonicalJSONFallsBackToBytes(t *testing.T) {
	for _, c := range []struct {
		name          string
		header        http.Header
		first, second string
	}{
		{"duplicate name", jsonHeader, `{"a":1,"a":2}`, `{"a":1 ,"a":2}`},
		{"not JSON", jsonHeader, `amount=1`, `amount=1.0`},
		{"invalid UTF-8", jsonHeader, "[\"\xff\"]", "[ \"\xff\"]"},
		{"text/plain", http.Header{"Content-Type": {"text/plain"}}, `{"a":1}`, `{"a":1.0}`},
		{"no Content-Type", nil, `{"a":1}`, `{"a":1.0}`},
		// 16 bytes sent, 67 canonical: over MaxBodyBytes (40).
		{"canonical form too large", jsonHeader, `[1e20,1e20,1e20]`, `[1e20,1e20, 1e20]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &bodySeer{}
			srv := serveCanonical(t, &idemhttp.Options{MaxBodyBytes: 40}, h)
			call := idemhttptest.Call{Key: "k", User: "u", Header: c.header, Body: []byte(c.first)}
			require.Equal(t, http.StatusCreated, idemhttptest.Send(t, srv, call).Status)
			again := idemhttptest.Send(t, srv, call)
			require.Equal(t, http.StatusCreated, again.Status)
			require.True(t, again.Replayed())
			call.Body = []byte(c.second)
			typ, _ := idemhttptest.ProblemOf(t, idemhttptest.Send(t, srv, call))
			require.Equal(t, idemhttp.ProblemKeyReuse, typ)
			require.Equal(t, []string{c.first}, h.seen())
		})
	}
}

// TestCanonicalJSONKeepsWrapsAnswers: a body over MaxBodyBytes is 413, an
// unreadable one 400, uncovered methods and requests without a key pass
// through with their body, as with Wrap.
func TestCanonicalJSONKeepsWrapsAnswers(t *testing.T) {
	h := &bodySeer{}
	srv := serveCanonical(t, &idemhttp.Options{MaxBodyBytes: 16}, h)
	big := `{"a":"` + strings.Repeat("x", 20) + `"}`
	typ, _ := idemhttptest.ProblemOf(t, idemhttptest.Send(t, srv, idemhttptest.Call{Key: "k", User: "u", Header: jsonHeader, Body: []byte(big)}))
	require.Equal(t, idemhttp.ProblemBodyTooLarge, typ)

	// Without Content-Length (chunked), the limit is found by reading.
	req := httptest.NewRequest(http.MethodPost, "/pay", io.MultiReader(strings.NewReader(big)))
	req.ContentLength = -1
	req.Header = jsonHeader.Clone()
	req.Header.Set("Idempotency-Key", "k")
	req.Header.Set("X-User", "u")
	mw, err := idemhttp.New(openDB(t, idemhttptest.NewClock().Now, nil), &idemhttp.Options{Scope: idemhttptest.UserScope, MaxBodyBytes: 16})
	require.NoError(t, err)
	w := httptest.NewRecorder()
	mw.WrapCanonicalJSON(h).ServeHTTP(w, req)
	require.Equal(t, http.StatusRequestEntityTooLarge, w.Code, w.Body.String())

	req = httptest.NewRequest(http.MethodPost, "/pay", failing{})
	req.Header = jsonHeader.Clone()
	req.Header.Set("Idempotency-Key", "k2")
	req.Header.Set("X-User", "u")
	w = httptest.NewRecorder()
	mw.WrapCanonicalJSON(h).ServeHTTP(w, req)
	require.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
	require.Contains(t, w.Body.String(), idemhttp.ProblemBodyUnreadable)

	for _, c := range []idemhttptest.Call{
		{Method: http.MethodPut, Key: "k3", User: "u", Header: jsonHeader, Body: []byte(`{"b":1,"a":2}`)},
		{User: "u", Header: jsonHeader, Body: []byte(`{"d":1,"c":2}`)},
	} {
		require.Equal(t, http.StatusCreated, idemhttptest.Send(t, srv, c).Status)
	}
	require.Equal(t, []string{`{"b":1,"a":2}`, `{"d":1,"c":2}`}, h.seen())
	require.Panics(t, func() { mw.WrapCanonicalJSON(nil) })
}

// TestCanonicalJSONReadsNoBodyBefore401: as with Wrap, the body of a
// request whose caller cannot be identified is not read at all.
func TestCanonicalJSONReadsNoBodyBefore401(t *testing.T) {
	h := &bodySeer{}
	mw, err := idemhttp.New(openDB(t, idemhttptest.NewClock().Now, nil), &idemhttp.Options{Scope: idemhttptest.UserScope})
	require.NoError(t, err)
	body := &countingReader{r: strings.NewReader(`{"b":1,"a":2}`)}
	req := httptest.NewRequest(http.MethodPost, "/pay", body)
	req.Header = jsonHeader.Clone()
	req.Header.Set("Idempotency-Key", "k")
	w := httptest.NewRecorder()
	mw.WrapCanonicalJSON(h).ServeHTTP(w, req)
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.Zero(t, body.reads)
	require.Empty(t, h.seen())
}

// countingReader counts the reads of r.
type countingReader struct {
	r     io.Reader
	reads int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads++
	return c.r.Read(p)
}

// failing is a request body whose reads fail.
type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("connection reset") }
