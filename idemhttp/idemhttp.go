package idemhttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/oncekv/oncekv"
)

// Middleware is the Idempotency-Key middleware over one store. It is safe
// for concurrent use; Wrap as many handlers as needed.
type Middleware struct {
	db   *oncekv.DB
	opts Options
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
	o, err := opts.withDefaults()
	if db == nil {
		err = errors.Join(fmt.Errorf("%w: db is nil", ErrInvalidOptions), err)
	}
	if err != nil {
		return nil, err
	}
	if o.Now == nil {
		o.Now = db.Now // one injected clock drives marks, leases and Retry-After
	}
	m := &Middleware{db: db, opts: o, methods: map[string]bool{}, replay: map[string]bool{}, retention: db.WindowReport().Retention}
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
	case m == nil || m.db == nil:
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
	c, err := m.db.Claim(r.Context(), req, m.opts.Lease)
	if err != nil {
		m.claimFailed(w, r, err)
		return
	}
	if c.Done() {
		res := c.Result()
		m.replayRecord(w, res.Response, res.FirstSeen)
		return
	}
	st := &state{key: c.Key(), token: c.Token()}
	m.run(w, r, next, c, st, body)
}

// claimFailed answers a request whose key could not be claimed.
func (m *Middleware) claimFailed(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, oncekv.ErrInProgress):
		secs := retryAfterSeconds(retryAfter(err, m.opts.Now(), m.opts.Lease))
		w.Header().Set("Retry-After", fmt.Sprint(secs))
		writeProblem(w, ProblemInProgress, http.StatusConflict,
			fmt.Sprintf("a request with this key is still running; retry in %d s", secs))
	case errors.Is(err, oncekv.ErrKeyReuse):
		writeProblem(w, ProblemKeyReuse, http.StatusUnprocessableEntity,
			"this key was first used with another request (method, path, query or body)")
	case r.Context().Err() != nil, errors.Is(err, oncekv.ErrClosed):
		writeProblem(w, ProblemUnavailable, http.StatusServiceUnavailable, "the request could not be recorded; retry it")
	default:
		m.opts.Logger.Error("idemhttp: claim failed", "err", err)
		writeProblem(w, ProblemStoreFailed, http.StatusInternalServerError, "the request could not be recorded; retry it")
	}
}

// retryAfter is how long a client should wait before retrying a key held by
// a running request: until the live claim's lease ends, when err carries it
// (a LeaseUntil method anywhere in its chain), and otherwise fallback, the
// whole lease, which the remaining lease never exceeds because every
// heartbeat extends it to Lease from then.
func retryAfter(err error, now time.Time, fallback time.Duration) time.Duration {
	var held interface{ LeaseUntil() time.Time }
	if errors.As(err, &held) {
		if until := held.LeaseUntil(); !until.IsZero() {
			return until.Sub(now)
		}
	}
	return fallback
}

// retryAfterSeconds rounds d up to whole seconds, at least 1: Retry-After
// has no finer unit, and 0 would invite a client to retry at once.
func retryAfterSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++ // rounded up without adding to d, which may be near its maximum
	}
	return max(s, 1)
}

// run runs next for the claimed key and records or releases the outcome.
func (m *Middleware) run(w http.ResponseWriter, r *http.Request, next http.Handler, c *oncekv.Claim, st *state, body []byte) {
	ctx, lost := context.WithCancelCause(context.WithValue(r.Context(), stateKey{}, st))
	defer lost(nil)
	hb := m.heartbeat(c, lost)
	rec := newRecorder(w, m)
	settled := false
	defer func() {
		// Reached by a panic or runtime.Goexit in the handler too: the key
		// must not stay held until its lease ends, or a retry would get 409
		// for a request that is not running.
		hb.stop()
		st.close()
		if !settled {
			m.release(c, "the handler did not return")
		}
	}()
	r2 := r.WithContext(ctx)
	r2.Body, r2.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	next.ServeHTTP(rec, r2)
	hb.stop()
	st.close()
	m.finish(rec, r, c, st)
	// Only now: a staged write that panics inside finish's commit must
	// release the key too. A second release is refused harmlessly.
	settled = true
}

// finish records and sends the response of a handler that returned.
func (m *Middleware) finish(rec *recorder, r *http.Request, c *oncekv.Claim, st *state) {
	if r.Context().Err() != nil {
		m.release(c, "the client went away")
		return
	}
	rec.decide()
	if !st.storing() {
		m.forget(c)
		_ = rec.sendHeld() // a client gone now has nothing to learn
		return
	}
	if rec.pass {
		m.release(c, "the response is not stored")
		return
	}
	record := rec.record()
	res, err := c.Complete(context.WithoutCancel(r.Context()), record, st.effect())
	if err != nil {
		m.release(c, "the commit failed")
		var se *stageError
		if errors.As(err, &se) {
			err = se.err
		}
		m.opts.Logger.Error("idemhttp: storing the response failed", "key", st.key, "err", err)
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

// release lets a retry claim the key at once, keeping nothing.
func (m *Middleware) release(c *oncekv.Claim, why string) {
	// Fail with an ordinary (not Permanent) error releases the key. It can
	// fail only if the claim was lost already (taken over, done), or the
	// store failed, in which case the lease frees the key when it ends.
	if err := c.Fail(context.Background(), errors.New("oncekv: idemhttp: "+why)); err != nil &&
		!errors.Is(err, oncekv.ErrClaimDone) {
		m.opts.Logger.Warn("idemhttp: releasing a key failed; it frees itself when its lease ends", "err", err)
	}
}

// forget drops the key's mark (DoNotStore): the next request of the key
// runs afresh, whatever its body. If that fails, the key is released as
// for a response not stored.
func (m *Middleware) forget(c *oncekv.Claim) {
	if err := c.Abandon(context.Background()); err != nil && !errors.Is(err, oncekv.ErrClaimDone) {
		m.opts.Logger.Warn("idemhttp: forgetting a key failed; releasing it", "err", err)
		m.release(c, "the handler asked not to store its answer")
	}
}

// heartbeat extends c's lease every Options.Heartbeat until stop. If the
// claim is lost (taken over after a stall), it cancels the handler's
// context with the reason, so the handler can stop its work.
func (m *Middleware) heartbeat(c *oncekv.Claim, lost context.CancelCauseFunc) *beat {
	ctx, cancel := context.WithCancel(context.Background())
	b := &beat{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		t := time.NewTicker(m.opts.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := c.Extend(ctx, m.opts.Lease)
			if errors.Is(err, oncekv.ErrFenced) || errors.Is(err, oncekv.ErrClaimDone) {
				lost(err)
				return
			}
			// Any other error (the store is closing, a failed write) is
			// retried at the next beat; the lease still covers it.
		}
	}()
	return b
}

// beat is a running heartbeat.
type beat struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// stop ends the heartbeat and waits for it; calling it again is harmless.
func (b *beat) stop() {
	b.cancel()
	<-b.done
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
	h := sha256.New()
	var scratch []byte
	field := func(s string) {
		scratch = binary.AppendUvarint(scratch[:0], uint64(len(s)))
		h.Write(scratch)
		io.WriteString(h, s)
	}
	field(r.Method)
	field(r.URL.EscapedPath())
	field(r.URL.RawQuery)
	for _, name := range m.fingerprint {
		values := r.Header.Values(name)
		field(name)
		scratch = binary.AppendUvarint(scratch[:0], uint64(len(values)))
		h.Write(scratch)
		for _, v := range values {
			field(v)
		}
	}
	sum := sha256.Sum256(body)
	h.Write(sum[:])
	return h.Sum(nil)
}

// storeKey is the oncekv key of (scope, key). The scope goes in hashed: a
// fixed width keeps every key within bbolt's limit whatever the scope's
// length, and no (scope, key) pair can be spelt like another.
func storeKey(scope, key string) string {
	sum := sha256.Sum256([]byte(scope))
	return hex.EncodeToString(sum[:16]) + "/" + key
}
