package oncekv

import (
	"context"
	"fmt"
	"runtime"
	"sync"
)

// DefaultMaxInFlight is ApplierOptions.MaxInFlight's default.
const DefaultMaxInFlight = 256

// ApplierOptions configures an Applier (DB.NewApplier).
type ApplierOptions struct {
	// MaxInFlight caps the requests submitted whose done has not returned
	// yet: Submit blocks while that many are in flight. It also caps how
	// many of them one commit can take (as Options.MaxGroupSize does).
	// Default DefaultMaxInFlight; zero means the default.
	MaxInFlight int
}

// Applier pipelines Apply for one goroutine: Submit hands the store a
// request and returns without waiting for its commit, so that the requests
// submitted while one commit runs share the next one, as concurrent Apply
// calls do (docs/design/group-commit.md). Each request gets the result and
// error Apply would give it, passed to its done callback once the commit
// that decided it has returned (durable unless Options.NoSync).
//
// Effects run in the order their requests were submitted, inside the
// group commit, on goroutines of the store (an effect may run more than
// once, as with Apply: only the run that commits leaves changes). Every
// done, and the OnCommit hooks before it, runs in submission order on one
// goroutine of the Applier; done must not call Submit, Flush or Close of
// the same Applier, nor DB.Close (they would wait for done itself), and a
// slow done holds up the next ones, not the commits. An effect, like
// Apply's, must not write through the DB nor Submit to an Applier (it
// would wait for the commit that runs it).
//
// An Applier is safe for concurrent use; requests submitted from several
// goroutines are ordered as their Submit calls took them. Close it to end
// its goroutines; DB.Close waits for the requests in flight.
type Applier struct {
	db *DB
	// slots holds one token per request in flight, from Submit until its
	// done has returned.
	slots chan struct{}
	// posted carries accepted requests to drive, in submission order;
	// finished, from drive to complete.
	posted, finished chan *submission
	// closing is closed when Close begins; stopped once every request
	// accepted is done.
	closing, stopped chan struct{}

	mu struct {
		sync.Mutex
		// closed: Close has begun; the group's queue and posted get new
		// requests, in the same order, only while it holds mu and closed is false.
		closed    bool
		submitted uint64
	}
	st struct {
		sync.Mutex
		completed uint64
		// advanced, when not nil, is closed the next time completed grows.
		advanced chan struct{}
		// panicVal and goexit are the first panic or runtime.Goexit of an
		// effect, an OnCommit hook or a done not raised yet.
		panicVal any
		goexit   bool
	}
}

// submission is one request accepted by Submit.
type submission struct {
	o    *op
	done func(Result, error)
	// queued: o went to the group commit (else it was settled in Submit).
	queued bool
}

// NewApplier returns an Applier for db. It fails with ErrClosed once db is
// closed, and with ErrInvalidOptions, naming the field, for a negative
// MaxInFlight.
func (db *DB) NewApplier(opts ApplierOptions) (*Applier, error) {
	if opts.MaxInFlight < 0 {
		return nil, fmt.Errorf("%w: MaxInFlight = %d: must be positive (zero means the default)", ErrInvalidOptions, opts.MaxInFlight)
	}
	if !db.isOpen() {
		return nil, ErrClosed
	}
	n := opts.MaxInFlight
	if n == 0 {
		n = DefaultMaxInFlight
	}
	a := &Applier{
		db:       db,
		slots:    make(chan struct{}, n),
		posted:   make(chan *submission, n),
		finished: make(chan *submission, n),
		closing:  make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	go a.drive()
	go a.complete()
	return a, nil
}

// Submit hands req to the store, to be applied as Apply(ctx, req, effect)
// would, and calls done with its result and error once the commit that
// decided it has returned: done never learns of an outcome before it is
// durable. A nil done is allowed (Flush then tells when it is over).
//
// Submit blocks while MaxInFlight requests are in flight, until one is
// done or ctx ends. It returns an error only for a request it did not
// take, whose done is never called: ctx's error (in a *RequestError) when
// ctx ended first, ErrClosed once the Applier or the DB is closed. Bad
// input, and ctx ending before the request's commit takes it, are the
// request's error, given to done, as Apply returns them (nothing applied);
// its done still comes in submission order, after the earlier requests'.
//
// A panic or runtime.Goexit of an effect, an OnCommit hook or a done (as
// t.FailNow does) is raised again by the next Submit, Flush or Close, in
// its caller's goroutine, with its value unchanged; that request's done
// is not called, and nothing of its effect is recorded.
func (a *Applier) Submit(ctx context.Context, req Request, effect func(tx *Tx) ([]byte, error), done func(Result, error)) error {
	a.raise()
	if err := ctx.Err(); err != nil {
		a.db.stats.count(req.Handler, outcomeAborted)
		return requestError("apply", &req, err)
	}
	select {
	case a.slots <- struct{}{}:
	case <-ctx.Done():
		a.db.stats.count(req.Handler, outcomeAborted)
		return requestError("apply", &req, ctx.Err())
	case <-a.closing:
		return ErrClosed
	}
	if !a.db.life.enter() {
		<-a.slots
		return ErrClosed
	}
	r := req // the op outlives this call
	s := &submission{done: done}
	o, err := a.db.newOp(ctx, &r, effect)
	if err != nil {
		o = &op{ctx: ctx, req: &r}
		o.fail(outcomeInvalid, err)
		o.settled = true
	} else {
		// A duplicate of a committed key is answered here, as Apply answers
		// it; one of a key still in flight is not in the snapshot yet, and
		// goes to the group commit, which sees the mark.
		s.queued = !a.db.answerFromSnapshot([]*op{o})
	}
	s.o = o

	a.mu.Lock()
	if a.mu.closed {
		a.mu.Unlock()
		a.db.life.exit()
		<-a.slots
		return ErrClosed
	}
	if s.queued {
		a.db.group.post(o)
	}
	a.posted <- s // never blocks: it has room for every slot
	a.mu.submitted++
	a.mu.Unlock()
	return nil
}

// Flush waits until every request submitted before it is done (its done
// has returned), or ctx ends: it then returns ctx's error. It raises a
// panic recorded meanwhile, as Submit does.
func (a *Applier) Flush(ctx context.Context) error {
	a.mu.Lock()
	target := a.mu.submitted
	a.mu.Unlock()
	for {
		a.st.Lock()
		if a.st.completed >= target {
			a.st.Unlock()
			break
		}
		if a.st.advanced == nil {
			a.st.advanced = make(chan struct{})
		}
		advanced := a.st.advanced
		a.st.Unlock()
		select {
		case <-advanced:
		case <-ctx.Done():
			a.raise()
			return ctx.Err()
		}
	}
	a.raise()
	return nil
}

// Close refuses new requests (Submit returns ErrClosed, a Submit waiting
// for room included), waits until every request in flight is done, and
// ends the Applier's goroutines. It returns nil, also when called again
// (the error is io.Closer's); it raises a panic recorded meanwhile, as
// Submit does, once the Applier is closed. Close does not close the DB.
func (a *Applier) Close() error {
	a.mu.Lock()
	if !a.mu.closed {
		a.mu.closed = true
		close(a.closing)
		close(a.posted)
	}
	a.mu.Unlock()
	<-a.stopped
	a.raise()
	return nil
}

// drive waits for each accepted request's commit, in submission order,
// leading it when the group commit promotes the request (group.await),
// and passes it on to complete. It never runs user code itself, so that a
// slow done cannot hold up a commit that other callers wait for.
func (a *Applier) drive() {
	for s := range a.posted {
		if s.queued {
			a.db.group.await(s.o)
		}
		a.finished <- s // never blocks: it has room for every slot
	}
	close(a.finished)
}

// complete settles each request, as Apply does, and calls its done, in
// submission order, until Close.
func (a *Applier) complete() {
	for s := range a.finished {
		a.finishOne(s)
	}
	close(a.stopped)
}

// finishOne settles s and calls its done, frees its slot and counts it
// done, whatever the user's code does: a panic is recorded, and a
// runtime.Goexit, which ends this goroutine, is recorded and a new one
// goes on with the next requests.
func (a *Applier) finishOne(s *submission) {
	returned := false
	defer func() {
		exited := false
		if !returned {
			p := recover()
			exited = p == nil // recover returns nil during a Goexit
			a.record(p, exited)
		}
		a.db.life.exit()
		<-a.slots
		a.st.Lock()
		a.st.completed++
		if a.st.advanced != nil {
			close(a.st.advanced)
			a.st.advanced = nil
		}
		a.st.Unlock()
		if exited {
			go a.complete()
		}
	}()
	o := s.o
	res, err := a.db.settle(o) // runs o's OnCommit hooks
	switch {
	case o.panicVal != nil:
		a.record(o.panicVal, false)
	case o.goexit:
		a.record(nil, true)
	case s.done != nil:
		s.done(res, err)
	}
	returned = true
}

// record keeps a panic (p) or runtime.Goexit for raise, unless one is kept
// already.
func (a *Applier) record(p any, goexit bool) {
	a.st.Lock()
	defer a.st.Unlock()
	if a.st.panicVal == nil && !a.st.goexit {
		a.st.panicVal, a.st.goexit = p, goexit
	}
}

// raise raises again, in the caller's goroutine, the panic or
// runtime.Goexit record kept, once.
func (a *Applier) raise() {
	a.st.Lock()
	p, goexit := a.st.panicVal, a.st.goexit
	a.st.panicVal, a.st.goexit = nil, false
	a.st.Unlock()
	if p != nil {
		panic(p)
	}
	if goexit {
		runtime.Goexit()
	}
}
