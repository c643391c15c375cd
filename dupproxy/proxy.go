package dupproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// Proxy is the duplicate-injecting reverse proxy: an http.Handler. Its
// methods are safe for concurrent use.
type Proxy struct {
	o      Options
	rp     *httputil.ReverseProxy
	router *router
	masks  []mask
	stats  *stats

	slots  chan struct{} // MaxInFlight tokens, one per copied request in flight
	copies sync.WaitGroup
	ctx    context.Context // the copies', cancelled by Close
	cancel context.CancelFunc
	mu     struct {
		sync.Mutex
		closed bool // no copy starts: copies.Add never races Close's Wait
	}
}

// New returns a Proxy to o.Upstream. Errors: ErrInvalidOptions naming
// every bad field (an Upstream missing, a bad route pattern or mask...).
func New(o *Options) (*Proxy, error) {
	c, err := o.withDefaults()
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	p := &Proxy{o: c, stats: newStats(c.MaxRoutes, c.MaxExamples), slots: make(chan struct{}, max(c.MaxInFlight, 1))}
	for _, m := range c.Mask {
		pm, err := parseMask(m)
		if err != nil {
			errs = append(errs, err)
		}
		p.masks = append(p.masks, pm)
	}
	if p.router, err = newRouter(&c); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(c.Upstream)
			pr.SetXForwarded()
			if c.PreserveHost {
				pr.Out.Host = pr.In.Host
			}
		},
		Transport:    c.Transport,
		ErrorLog:     log.New(io.Discard, "", 0),
		ErrorHandler: p.upstreamError,
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p, nil
}

// upstreamError answers a request the upstream did not answer: 502 to a
// client, as ReverseProxy does; for a copy, the recorder keeps the error.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if rec, ok := w.(*recorder); ok {
		rec.err = err
		return
	}
	p.o.Logger.Debug("dupproxy: upstream", "method", r.Method, "path", r.URL.Path, "err", err)
	w.WriteHeader(http.StatusBadGateway)
}

// ServeHTTP forwards r, and sends a copy of it when it is drawn for one.
// The client's answer is the upstream's answer to r, whatever the copy.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	route, eligible := p.router.route(r)
	p.stats.forwarded(route)
	if !eligible || p.o.Rand() >= p.o.Fraction {
		p.rp.ServeHTTP(w, r)
		return
	}
	body, err := readUpTo(r.Body, p.o.MaxBody)
	if err != nil || int64(len(body)) > p.o.MaxBody {
		// Too large, or the client's body failed: forward it as it came
		// (the upstream sees the same failure), without a copy.
		if err == nil {
			p.stats.skipped(true)
		}
		r.Body = readCloser{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
		p.rp.ServeHTTP(w, r)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	select {
	case p.slots <- struct{}{}:
	default:
		p.stats.skipped(false)
		p.rp.ServeHTTP(w, r)
		return
	}
	if !p.startCopy() {
		<-p.slots
		p.rp.ServeHTTP(w, r)
		return
	}
	p.stats.copiedRequest()
	orig := &capture{ResponseWriter: w, kept: kept{max: p.o.MaxBody}}
	start := make(chan struct{})    // the copies may go
	answered := make(chan struct{}) // the original's answer is complete (or failed: orig.done false)
	var startOnce sync.Once
	go p.sendCopies(route, newTemplate(r, body), orig, start, answered)
	completed := false
	defer func() { // also when the ReverseProxy panics (a client gone)
		orig.done = completed
		close(answered)
		startOnce.Do(func() { close(start) })
	}()
	if p.o.Mode == Concurrent {
		trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
			startOnce.Do(func() { close(start) })
		}}
		r = r.WithContext(httptrace.WithClientTrace(r.Context(), trace))
	}
	p.rp.ServeHTTP(orig, r)
	completed = true
}

// sendCopies sends the copies of tmpl once start is closed (and, for
// Delayed, the Delay after), compares each with the original's answer
// once answered is closed, and records them. It owns one of p.slots and
// one count of p.copies. Without a complete original there is nothing
// to compare with, and nothing is sent (or recorded).
func (p *Proxy) sendCopies(route string, tmpl *template, orig *capture, start, answered <-chan struct{}) {
	defer p.copies.Done()
	defer func() { <-p.slots }()
	select {
	case <-start:
	case <-p.ctx.Done():
		return
	}
	if p.o.Mode != Concurrent && !orig.done { // answered is closed before start, then
		return
	}
	if p.o.Mode == Delayed {
		t := time.NewTimer(p.o.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-p.ctx.Done():
			return
		}
	}
	kinds := p.kinds(tmpl)
	answers := make([]*answer, len(kinds))
	var wg sync.WaitGroup
	for i, strip := range kinds {
		wg.Go(func() { answers[i] = p.send(tmpl, strip) })
	}
	wg.Wait()
	select {
	case <-answered:
	case <-p.ctx.Done():
	}
	if !orig.done || p.ctx.Err() != nil { // no original to compare with, or closed
		return
	}
	o := orig.answer()
	for i, strip := range kinds {
		a := answers[i]
		conflict := false
		if cs := p.o.ConflictStatus; p.o.Mode == Concurrent && a.err == nil && (a.status == cs) != (o.status == cs) {
			if a.status == cs { // the original was running still: ask again now that it is answered
				a = p.send(tmpl, strip)
				conflict = a.err == nil && a.status == cs
			} else {
				conflict = true // the upstream took the copy first, and the client got the 409
			}
		}
		kind := WithKey
		if strip || tmpl.header.Get(p.o.KeyHeader) == "" {
			kind = WithoutKey
		}
		res := &copyResult{route: route, kind: kind, method: tmpl.method, path: tmpl.url.Path,
			orig: o, copy: a, conflict: conflict, fail: a.err != nil}
		if a.err != nil {
			p.o.Logger.Debug("dupproxy: copy failed", "route", route, "err", a.err)
		} else if !conflict {
			res.difference = compare(o, a, p.o.CompareHeaders, p.masks)
		}
		p.stats.record(res)
	}
}

// startCopy counts a copy in p.copies, unless Close has begun.
func (p *Proxy) startCopy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		return false
	}
	p.copies.Add(1)
	return true
}

// kinds lists the copies to send: false keeps the key, true strips it.
func (p *Proxy) kinds(tmpl *template) []bool {
	hasKey := tmpl.header.Get(p.o.KeyHeader) != ""
	switch {
	case p.o.Keys == StripKey:
		return []bool{true}
	case p.o.Keys == BothKeys && hasKey:
		return []bool{false, true}
	}
	return []bool{false}
}

// send sends one copy through the ReverseProxy, as if it came from the
// original's client, and returns its answer.
func (p *Proxy) send(tmpl *template, stripKey bool) *answer {
	req := tmpl.request(p.ctx)
	if stripKey {
		req.Header.Del(p.o.KeyHeader)
	}
	rec := &recorder{header: http.Header{}, kept: kept{max: p.o.MaxBody}}
	p.rp.ServeHTTP(rec, req)
	return rec.answer()
}

// Report returns the report as of now.
func (p *Proxy) Report() Report { return p.stats.report() }

// Wait waits until no copy is in flight, or ctx is done (its error).
func (p *Proxy) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		p.copies.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close cancels the copies in flight (and those waiting for their Delay)
// and waits for them to end. Requests being forwarded are not affected,
// and requests after Close are forwarded without a copy. It may be called
// more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.mu.closed = true
	p.mu.Unlock()
	p.cancel()
	p.copies.Wait()
	return nil
}

// readUpTo reads r until EOF or past max bytes (max+1 read: the caller
// tells "too large" by the length).
func readUpTo(r io.Reader, max int64) ([]byte, error) {
	if r == nil || r == http.NoBody {
		return nil, nil
	}
	return io.ReadAll(io.LimitReader(r, max+1))
}

// readCloser is a body read from r and closed through c.
type readCloser struct {
	io.Reader
	c io.Closer
}

func (rc readCloser) Close() error { return rc.c.Close() }

// template is what a copy is made from: the original request as it came,
// with its body.
type template struct {
	method, host, remoteAddr string
	url                      url.URL
	header                   http.Header
	body                     []byte
}

func newTemplate(r *http.Request, body []byte) *template {
	return &template{method: r.Method, host: r.Host, remoteAddr: r.RemoteAddr, url: *r.URL,
		header: r.Header.Clone(), body: body}
}

// request is a copy of the original, ready for the ReverseProxy: the
// same method, URL, Host, client address, headers and body.
func (t *template) request(ctx context.Context) *http.Request {
	u := t.url
	req := (&http.Request{Method: t.method, URL: &u, Host: t.host, RemoteAddr: t.remoteAddr,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: t.header.Clone()}).WithContext(ctx)
	if len(t.body) > 0 {
		req.Body = io.NopCloser(bytes.NewReader(t.body))
		req.ContentLength = int64(len(t.body))
	}
	return req
}
