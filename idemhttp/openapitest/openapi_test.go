package openapitest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
)

// options are the middleware's options under test: each one shows in the
// fragment.
func options() *idemhttp.Options {
	return &idemhttp.Options{
		Scope: func(r *http.Request) (string, error) {
			if u := r.Header.Get("X-User"); u != "" {
				return u, nil
			}
			return "", io.EOF
		},
		RequireKey:   true,
		MaxBodyBytes: 64,
		Lease:        42 * time.Second,
	}
}

// openDB opens a store whose Retention is 2 h.
func openDB(t *testing.T) *oncekv.DB {
	t.Helper()
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "api.db"), &oncekv.Options{ExpireInterval: -1, Retention: 2 * time.Hour, WindowSpan: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// ref is an OpenAPI reference to a component.
func ref(kind, name string) map[string]any {
	return map[string]any{"$ref": "#/components/" + kind + "/" + name}
}

// document is a whole OpenAPI 3.1 document with one operation, POST /pay,
// covered by the middleware, whose components are the fragment's: what a
// user's document looks like once the fragment is merged in.
func document(t *testing.T, fragment []byte) []byte {
	t.Helper()
	var frag map[string]any
	require.NoError(t, json.Unmarshal(fragment, &frag))
	require.Equal(t, []string{"components"}, keysOf(frag), "the fragment holds components only")
	stored := map[string]any{
		"description": "The payment, stored; a replay repeats it.",
		"headers": map[string]any{
			idemhttp.HeaderReplayed:          ref("headers", idemhttp.OpenAPIReplayedHeader),
			idemhttp.HeaderReplayBodyOmitted: ref("headers", idemhttp.OpenAPIBodyOmittedHeader),
			idemhttp.HeaderKeyExpires:        ref("headers", idemhttp.OpenAPIKeyExpiresHeader),
		},
		"content": map[string]any{"text/plain": map[string]any{"schema": map[string]any{"type": "string"}}},
	}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info":    map[string]any{"title": "payments", "version": "1"},
		"paths": map[string]any{"/pay": map[string]any{"post": map[string]any{
			"operationId": "pay",
			"parameters":  []any{ref("parameters", idemhttp.OpenAPIKeyParameter)},
			"responses": map[string]any{
				"201": stored,
				"400": ref("responses", idemhttp.OpenAPIBadRequest),
				"401": ref("responses", idemhttp.OpenAPIUnidentified),
				"409": ref("responses", idemhttp.OpenAPIInProgress),
				"410": ref("responses", idemhttp.OpenAPIResponseGone),
				"413": ref("responses", idemhttp.OpenAPIBodyTooLarge),
				"422": ref("responses", idemhttp.OpenAPIKeyReuse),
				"500": ref("responses", idemhttp.OpenAPIStoreFailed),
				"503": ref("responses", idemhttp.OpenAPIUnavailable),
			},
		}}},
		"components": frag["components"],
	}
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	return b
}

func keysOf(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// load loads and validates a document with kin-openapi.
func load(t *testing.T, b []byte) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(b)
	require.NoError(t, err)
	require.True(t, doc.IsOpenAPI31OrLater())
	require.NoError(t, doc.Validate(context.Background()), "%s", b)
	return doc
}

func TestFragmentValidatesInAWhole31Document(t *testing.T) {
	mw, err := idemhttp.New(openDB(t), options())
	require.NoError(t, err)
	fragment, err := mw.OpenAPI()
	require.NoError(t, err)
	doc := load(t, document(t, fragment))

	again, err := mw.OpenAPI()
	require.NoError(t, err)
	require.Equal(t, fragment, again, "the same options give the same bytes")

	// What the options say shows in the fragment.
	p := doc.Components.Parameters[idemhttp.OpenAPIKeyParameter].Value
	require.Equal(t, idemhttp.HeaderKey, p.Name)
	require.Equal(t, "header", p.In)
	require.True(t, p.Required, "RequireKey makes the header required")
	require.Equal(t, 42.0, *doc.Components.Headers[idemhttp.OpenAPIRetryAfterHeader].Value.Schema.Value.Max, "Retry-After is at most the lease")
	require.Contains(t, *doc.Components.Responses[idemhttp.OpenAPIBodyTooLarge].Value.Description, "64 bytes")
	require.Contains(t, doc.Components.Headers[idemhttp.OpenAPIKeyExpiresHeader].Value.Description, "2 h")

	// Each response names its own problem types, every one of them once.
	want := map[string][]string{
		idemhttp.OpenAPIBadRequest:   {idemhttp.ProblemKeyMissing, idemhttp.ProblemKeyInvalid, idemhttp.ProblemBodyUnreadable},
		idemhttp.OpenAPIUnidentified: {idemhttp.ProblemUnidentified},
		idemhttp.OpenAPIInProgress:   {idemhttp.ProblemInProgress},
		idemhttp.OpenAPIResponseGone: {idemhttp.ProblemResponseExpired},
		idemhttp.OpenAPIBodyTooLarge: {idemhttp.ProblemBodyTooLarge},
		idemhttp.OpenAPIKeyReuse:     {idemhttp.ProblemKeyReuse},
		idemhttp.OpenAPIStoreFailed:  {idemhttp.ProblemStoreFailed},
		idemhttp.OpenAPIUnavailable:  {idemhttp.ProblemUnavailable},
	}
	seen := map[string]string{}
	for name, types := range want {
		r := doc.Components.Responses[name]
		require.NotNil(t, r, name)
		s := r.Value.Content.Get("application/problem+json").Schema.Value
		var got []string
		for _, sub := range s.AllOf {
			if sub.Ref != "" {
				continue // the shared problem schema, listing every type
			}
			if typ, ok := sub.Value.Properties["type"]; ok && len(typ.Value.Enum) > 0 {
				for _, e := range typ.Value.Enum {
					got = append(got, e.(string))
				}
			}
		}
		require.ElementsMatch(t, types, got, name)
		for _, typ := range got {
			require.Empty(t, seen[typ], "%s is in %s and %s", typ, seen[typ], name)
			seen[typ] = name
		}
	}
}

func TestFragmentFollowsTheOptions(t *testing.T) {
	db := openDB(t)
	o := options()
	o.RequireKey = false
	mw, err := idemhttp.New(db, o)
	require.NoError(t, err)
	fragment, err := mw.OpenAPI()
	require.NoError(t, err)
	doc := load(t, document(t, fragment))
	require.False(t, doc.Components.Parameters[idemhttp.OpenAPIKeyParameter].Value.Required)
	bad := doc.Components.Responses[idemhttp.OpenAPIBadRequest].Value
	require.NotContains(t, *bad.Description, idemhttp.ProblemKeyMissing, "without RequireKey no 400 for a missing key")

	_, err = (&idemhttp.Middleware{}).OpenAPI()
	require.ErrorIs(t, err, idemhttp.ErrInvalidOptions)
}

// blocking is a handler that answers 201 once released, and says when a
// run started.
type blocking struct {
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blocking) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.started <- struct{}{}
	select {
	case <-b.release:
	case <-r.Context().Done():
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, "receipt R-1")
}

func (b *blocking) free() { b.once.Do(func() { close(b.release) }) }

// exchange is a request the server answered, as the client saw it.
type exchange struct {
	req  *http.Request
	resp *http.Response
	body []byte
}

// do sends a POST /pay to srv and reads the answer.
func do(t *testing.T, srv *httptest.Server, key, user, body string) exchange {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set(idemhttp.HeaderKey, key)
	}
	if user != "" {
		req.Header.Set("X-User", user)
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return exchange{req, resp, b}
}

// validate checks an answer against doc's operation for its request.
func validate(t *testing.T, router routers.Router, x exchange) error {
	t.Helper()
	// The router matches the path alone: the document lists no servers.
	req := x.req.Clone(context.Background())
	req.URL.Scheme, req.URL.Host = "", ""
	route, params, err := router.FindRoute(req)
	require.NoError(t, err)
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 x.resp.StatusCode,
		Header:                 x.resp.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(x.body)
	return openapi3filter.ValidateResponse(context.Background(), in)
}

// Real answers of the middleware, recorded off a real server, validate
// against the document; an answer that breaks the contract does not.
func TestRealAnswersValidateAgainstTheFragment(t *testing.T) {
	db := openDB(t)
	mw, err := idemhttp.New(db, options())
	require.NoError(t, err)
	fragment, err := mw.OpenAPI()
	require.NoError(t, err)
	doc := load(t, document(t, fragment))
	router, err := legacy.NewRouter(doc)
	require.NoError(t, err)

	b := &blocking{started: make(chan struct{}, 4), release: make(chan struct{})}
	defer b.free()
	srv := httptest.NewServer(mw.Wrap(b))
	defer srv.Close()

	firstDone := make(chan exchange, 1)
	go func() { firstDone <- do(t, srv, "k1", "alice", "pay 10") }()
	<-b.started

	inProgress := do(t, srv, "k1", "alice", "pay 10")
	require.Equal(t, http.StatusConflict, inProgress.resp.StatusCode, "%s", inProgress.body)
	require.NotEmpty(t, inProgress.resp.Header.Get(idemhttp.HeaderRetryAfter))
	reuse := do(t, srv, "k1", "alice", "pay 99")
	require.Equal(t, http.StatusUnprocessableEntity, reuse.resp.StatusCode, "%s", reuse.body)
	b.free()
	first := <-firstDone
	require.Equal(t, http.StatusCreated, first.resp.StatusCode)
	require.NotEmpty(t, first.resp.Header.Get(idemhttp.HeaderKeyExpires))
	replay := do(t, srv, "k1", "alice", "pay 10")
	require.Equal(t, "true", replay.resp.Header.Get(idemhttp.HeaderReplayed))

	answers := map[string]exchange{
		"409":         inProgress,
		"422":         reuse,
		"201 first":   first,
		"201 replay":  replay,
		"400 missing": do(t, srv, "", "alice", "x"),
		"400 invalid": do(t, srv, `"unterminated`, "alice", "x"),
		"401":         do(t, srv, "k2", "", "x"),
		"413":         do(t, srv, "k3", "alice", strings.Repeat("x", 65)),
	}
	require.NoError(t, db.Close())
	closed := do(t, srv, "k4", "alice", "x")
	require.Equal(t, http.StatusServiceUnavailable, closed.resp.StatusCode)
	answers["503 (closed)"] = closed
	for name, x := range answers {
		require.NoError(t, validate(t, router, x), "%s: %d %v %s", name, x.resp.StatusCode, x.resp.Header, x.body)
	}

	// The checks bite: a 409 without Retry-After, a 422 with another
	// problem type, and a replay whose expiry is no HTTP-date fail.
	broken := inProgress
	broken.resp = &http.Response{StatusCode: inProgress.resp.StatusCode, Header: inProgress.resp.Header.Clone()}
	broken.resp.Header.Del(idemhttp.HeaderRetryAfter)
	require.Error(t, validate(t, router, broken), "a 409 without Retry-After")
	broken.resp.Header.Set(idemhttp.HeaderRetryAfter, "43")
	require.Error(t, validate(t, router, broken), "a Retry-After past the lease")

	wrongType := reuse
	wrongType.body = bytes.Replace(reuse.body, []byte(idemhttp.ProblemKeyReuse), []byte(idemhttp.ProblemInProgress), 1)
	require.Error(t, validate(t, router, wrongType), "a 422 of the 409's type")

	badDate := replay
	badDate.resp = &http.Response{StatusCode: replay.resp.StatusCode, Header: replay.resp.Header.Clone()}
	badDate.resp.Header.Set(idemhttp.HeaderKeyExpires, "tomorrow")
	require.Error(t, validate(t, router, badDate), "an expiry that is no HTTP-date")
}
