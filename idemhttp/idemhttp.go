package idemhttp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/httpbridge"
	"github.com/oncekv/oncekv/internal/idemcore"
)

// Middleware is the Idempotency-Key middleware over one store. It is safe
// for concurrent use; Wrap as many handlers as needed.
type Middleware struct {
	db    *oncekv.DB // the embedded store, for Lookup; nil on another store
	proto idemcore.Protocol
	opts  Options
	// methods, fingerprint and replay come from Options, never from
	// requests, so their size is fixed at New.
	methods     map[string]bool
	fingerprint []string        // canonical header names, in Options order
	replay      map[string]bool // canonical header names
	retention   time.Duration   // the store's Retention, for HeaderKeyExpires
}

// New returns a middleware storing its records in db. It fails with
// ErrInvalidOptions when db is nil or opts is invalid (Scope is required).
func New(db *oncekv.DB, opts *Options) (*Middleware, error) {
	var store idemcore.Store
	if db != nil {
		store = idemcore.Embedded(db)
	}
	m, err := newMiddleware(store, opts)
	if err != nil {
		return nil, err
	}
	m.db = db
	return m, nil
}

func init() {
	// The PostgreSQL adapter (module postgres) builds this middleware over
	// its store through the bridge, so the HTTP semantics exist once.
	httpbridge.New = func(store idemcore.Store, opts any) (httpbridge.Middleware, error) {
		o, ok := opts.(*Options)
		if !ok {
			return nil, fmt.Errorf("%w: options of type %T, want *idemhttp.Options", ErrInvalidOptions, opts)
		}
		m, err := newMiddleware(store, o)
		if err != nil {
			return nil, err // not a typed nil *Middleware in the interface
		}
		return m, nil
	}
}

// newMiddleware is New over any store.
func newMiddleware(store idemcore.Store, opts *Options) (*Middleware, error) {
	o, err := opts.withDefaults()
	if store == nil {
		err = errors.Join(fmt.Errorf("%w: db is nil", ErrInvalidOptions), err)
	}
	if err != nil {
		return nil, err
	}
	if o.Now == nil {
		o.Now = store.Now // one injected clock drives marks, leases and Retry-After
	}
	m := &Middleware{
		proto:   idemcore.Protocol{Store: store, Lease: o.Lease, Heartbeat: o.Heartbeat, Now: o.Now, Logger: o.Logger},
		opts:    o,
		methods: map[string]bool{},
		replay:  map[string]bool{},
		// The store's Retention, for HeaderKeyExpires.
		retention: store.Retention(),
	}
	for _, name := range o.Methods {
		m.methods[name] = true
	}
	for _, name := range o.FingerprintHeaders {
		m.fingerprint = append(m.fingerprint, http.CanonicalHeaderKey(name))
	}
	// Content-Encoding belongs with the body: a stored body a handler
	// compressed is unreadable replayed without it.
	for _, name := range append([]string{"Content-Type", "Content-Encoding", "Location", "ETag"}, o.ReplayHeaders...) {
		m.replay[http.CanonicalHeaderKey(name)] = true
	}
	return m, nil
}

// Wrap returns next behind the middleware. Its method value has the usual
// middleware shape, func(http.Handler) http.Handler.
//
// Wrap panics, when the server is being set up rather than on every
// request, if next is nil or m was not made by New: a zero Middleware has
// no store, and letting requests through it would silently drop the
// protection the caller asked for (net/http's Handle panics on a nil
// handler for the same reason).
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	switch {
	case m == nil || m.proto.Store == nil:
		panic("idemhttp: Wrap on a Middleware not made by New")
	case next == nil:
		panic("idemhttp: Wrap of a nil handler")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !m.methods[r.Method] {
		next.ServeHTTP(w, r)
		return
	}
	key, present, err := parseKey(r.Header)
	switch {
	case err != nil:
		writeProblem(w, ProblemKeyInvalid, http.StatusBadRequest, err.Error())
		return
	case !present && m.opts.RequireKey:
		writeProblem(w, ProblemKeyMissing, http.StatusBadRequest, "this request needs an Idempotency-Key header")
		return
	case !present:
		next.ServeHTTP(w, r)
		return
	}
	scope, err := m.opts.Scope(r)
	if err != nil || scope == "" {
		writeProblem(w, ProblemUnidentified, http.StatusUnauthorized, "the caller could not be identified, and keys are kept per caller")
		return
	}
	body, err := readBody(r, m.opts.MaxBodyBytes)
	switch {
	case errors.Is(err, errBodyTooLarge):
		writeProblem(w, ProblemBodyTooLarge, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("the request body is over %d bytes", m.opts.MaxBodyBytes))
		return
	case err != nil:
		writeProblem(w, ProblemBodyUnreadable, http.StatusBadRequest, "the request body could not be read")
		return
	}
	req := oncekv.Request{Handler: m.opts.Handler, Key: storeKey(scope, key), Payload: m.fingerprintOf(r, body)}
	replay, run, err := m.proto.Begin(r.Context(), req)
	switch {
	case err != nil:
		m.claimFailed(w, r, err)
	case run == nil && replay.ResponseExpired:
		w.Header().Set(HeaderReplayed, "true")
		writeProblem(w, ProblemResponseExpired, http.StatusGone,
			"a request with this key was applied; its stored response has expired")
	case run == nil:
		m.replayRecord(w, replay.Response, replay.FirstSeen)
	default:
		m.run(w, r, next, run, body)
	}
}

// claimFailed answers a request whose key could not be claimed.
func (m *Middleware) claimFailed(w http.ResponseWriter, r *http.Request, err error) {
	refusal := m.proto.Refuse(r.Context(), err)
	switch refusal.Kind {
	case idemcore.InProgress:
		secs := idemcore.RetryAfterSeconds(refusal.RetryAfter)
		w.Header().Set("Retry-After", fmt.Sprint(secs))
		writeProblem(w, ProblemInProgress, http.StatusConflict,
			fmt.Sprintf("a request with this key is still running; retry in %d s", secs))
	case idemcore.KeyReuse:
		writeProblem(w, ProblemKeyReuse, http.StatusUnprocessableEntity,
			"this key was first used with another request (method, path, query or body)")
	case idemcore.Unavailable:
		writeProblem(w, ProblemUnavailable, http.StatusServiceUnavailable, "the request could not be recorded; retry it")
	default:
		m.opts.Logger.Error("idemhttp: claim failed", "err", err)
		writeProblem(w, ProblemStoreFailed, http.StatusInternalServerError, "the request could not be recorded; retry it")
	}
}

// run runs next for the claimed key and records or releases the outcome.
func (m *Middleware) run(w http.ResponseWriter, r *http.Request, next http.Handler, run *idemcore.Run, body []byte) {
	rec := newRecorder(w, m)
	settled := false
	defer func() {
		// Reached by a panic or runtime.Goexit in the handler too: the key
		// must not stay held until its lease ends, or a retry would get 409
		// for a request that is not running.
		run.Close()
		if !settled {
			run.Release("the handler did not return")
		}
	}()
	r2 := r.WithContext(run.Context())
	r2.Body, r2.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	next.ServeHTTP(rec, r2)
	run.Close()
	m.finish(rec, r, run)
	// Only now: a staged write that panics inside finish's commit must
	// release the key too. A second release is refused harmlessly.
	settled = true
}

// finish records and sends the response of a handler that returned.
func (m *Middleware) finish(rec *recorder, r *http.Request, run *idemcore.Run) {
	if r.Context().Err() != nil {
		run.Release("the client went away")
		return
	}
	rec.decide()
	if !run.Storing() {
		run.Forget()
		_ = rec.sendHeld() // a client gone now has nothing to learn
		return
	}
	if rec.pass {
		run.Release("the response is not stored")
		return
	}
	res, err := run.Complete(rec.record())
	if err != nil {
		m.opts.Logger.Error("idemhttp: storing the response failed", "key", run.Key(), "err", err)
		if rec.sent {
			// The client has part of the answer already; a clean end would
			// pass for success.
			panic(http.ErrAbortHandler)
		}
		rec.dropHeaders()
		writeProblem(rec.w, ProblemStoreFailed, http.StatusInternalServerError, "the response could not be recorded; retry the request")
		return
	}
	m.announceStored(rec, res.FirstSeen)
	rec.send()
}

// preGrowMax bounds the buffer allocated from a request's declared
// Content-Length before any of its body has arrived.
const preGrowMax = 1 << 20

var errBodyTooLarge = errors.New("oncekv: idemhttp: request body too large")

// readBody reads r's body whole, up to limit bytes.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, errBodyTooLarge
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		// The declared length is the client's word: it sizes the buffer
		// only up to preGrowMax, and the body read decides the rest.
		buf.Grow(int(min(r.ContentLength, preGrowMax)))
	}
	// One byte past the limit tells a body over it from one at it; at
	// math.MaxInt64, limit+1 would wrap to a reader of nothing.
	if _, err := buf.ReadFrom(io.LimitReader(r.Body, min(limit, math.MaxInt64-1)+1)); err != nil {
		return nil, err
	}
	if int64(buf.Len()) > limit {
		return nil, errBodyTooLarge
	}
	return buf.Bytes(), nil
}

// fingerprintOf is the SHA-256 of what makes two requests the same
// request: method, escaped path, raw query, the fingerprint headers and the
// body's hash, each length-prefixed so no two requests share an encoding.
func (m *Middleware) fingerprintOf(r *http.Request, body []byte) []byte {
	f := idemcore.NewFingerprint()
	f.Field(r.Method)
	f.Field(r.URL.EscapedPath())
	f.Field(r.URL.RawQuery)
	for _, name := range m.fingerprint {
		values := r.Header.Values(name)
		f.Field(name)
		f.Count(len(values))
		for _, v := range values {
			f.Field(v)
		}
	}
	f.Body(body)
	return f.Sum()
}

// storeKey is the oncekv key of (scope, key) (see idemcore.StoreKey).
func storeKey(scope, key string) string { return idemcore.StoreKey(scope, key) }
