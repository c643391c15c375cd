package relay

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/retry"
)

// Sender delivers one message to the far side. It returns nil once the far
// side has it, an error marked with retry.Permanent (or oncekv.Permanent)
// when no retry can succeed, and any other error (with retry.After for a
// Retry-After) to be retried. It must honour ctx, and be safe for
// concurrent use by the relay's workers.
type Sender func(ctx context.Context, m *queue.Message) error

// Relay delivers a queue through a Sender. Make one with New; it is safe
// for concurrent use (Stats while Run runs).
type Relay struct {
	q       *queue.Queue
	send    Sender
	opts    Options
	policy  retry.Policy
	retrier *retry.Retrier // the queue's policy with Options.Rand
	c       counters
	mu      struct {
		sync.Mutex
		running bool
		// held is when each worker's message was first enqueued (zero:
		// none), for OldestPendingAge; one entry per worker.
		held []time.Time
	}
}

// Run is New followed by Run: it delivers q through send until ctx is
// done.
func Run(ctx context.Context, q *queue.Queue, send Sender, opts *Options) error {
	r, err := New(q, send, opts)
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// New returns a relay of q through send, configured by opts (nil: every
// default). It starts nothing: call Run. Errors: ErrNilArgument,
// ErrInvalidOptions listing every bad field.
func New(q *queue.Queue, send Sender, opts *Options) (*Relay, error) {
	if q == nil || send == nil {
		return nil, fmt.Errorf("%w: queue and send are required", ErrNilArgument)
	}
	var given Options
	if opts != nil {
		given = *opts
	}
	if given.Now == nil {
		// One clock for the queue's leases and the relay's budget and ages,
		// injected or not.
		given.Now = q.DB().Now
	}
	o, err := given.withDefaults(q.Options().Visibility)
	if err != nil {
		return nil, err
	}
	p := q.Policy()
	p.Rand, p.Budget = o.Rand, nil
	rt, err := retry.New(&p)
	if err != nil {
		return nil, fmt.Errorf("%w: the queue's policy: %w", ErrInvalidOptions, err)
	}
	r := &Relay{q: q, send: send, opts: o, policy: rt.Policy(), retrier: rt}
	r.mu.held = make([]time.Time, o.Workers)
	return r, nil
}

// Run receives and sends with Options.Workers workers until ctx is done,
// then lets sends in flight finish within Options.Grace, and returns nil
// once every worker has stopped (see the package doc for what happens to
// each message). It returns early with the first error that is not the
// lease being taken over: the queue closed, the store failing. A send that
// panics (or calls runtime.Goexit) stops every worker, and the panic is
// raised again (or Goexit called) in Run's goroutine; its message is sent
// again once its lease ends. Errors: ErrRunning.
func (r *Relay) Run(ctx context.Context) error {
	if err := r.begin(); err != nil {
		return err
	}
	defer r.end()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	// Sends outlive ctx by the grace period: a request half sent when a
	// service shuts down gets its chance to finish and be acked.
	sendCtx, cancelSends := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSends()
	done := make(chan struct{})
	var timer sync.WaitGroup
	timer.Add(1)
	go func() {
		defer timer.Done()
		r.graceTimer(runCtx, done, cancelSends)
	}()
	defer timer.Wait() // after close(done): defers run last first
	defer close(done)

	var (
		wg     sync.WaitGroup
		errMu  sync.Mutex
		first  error
		caught *fault
	)
	record := func(err error, f *fault) {
		errMu.Lock()
		defer errMu.Unlock()
		if first == nil && caught == nil {
			first, caught = err, f
		}
		stop()
	}
	for i := range r.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			normal := false
			defer func() {
				if !normal {
					// recover finds nothing after runtime.Goexit, which
					// goes on unwinding this goroutine regardless.
					v := recover()
					record(nil, &fault{value: v, goexit: v == nil})
				}
			}()
			err := r.work(runCtx, sendCtx, i)
			normal = true
			if err != nil {
				record(err, nil)
			}
		}()
	}
	wg.Wait()
	if caught != nil {
		caught.raise()
	}
	return first
}

func (r *Relay) begin() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.running {
		return ErrRunning
	}
	r.mu.running = true
	return nil
}

func (r *Relay) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.running = false
}

// graceTimer cancels the sends Options.Grace after runCtx is done, or when
// Run returns.
func (r *Relay) graceTimer(runCtx context.Context, done <-chan struct{}, cancelSends func()) {
	select {
	case <-done:
		return
	case <-runCtx.Done():
	}
	if r.opts.Grace < 0 {
		cancelSends()
		return
	}
	t := time.NewTimer(r.opts.Grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		cancelSends()
	}
}

// work is one worker's loop. It returns nil when runCtx is done, or the
// error that stops the relay. While messages are visible, each ack leases
// the next one in the same commit (queue.AckAndPoll): one commit per
// message sent; the worker waits in Receive only when none was.
func (r *Relay) work(runCtx, sendCtx context.Context, i int) error {
	var m *queue.Message
	for {
		if m == nil {
			var err error
			if m, err = r.q.Receive(runCtx); err != nil {
				if runCtx.Err() != nil {
					return nil
				}
				return err
			}
		}
		var err error
		if m, err = r.deliver(runCtx, sendCtx, i, m); err != nil {
			return err
		}
	}
}

// deliver sends m once (or defers it unsent) and settles it with the
// queue. After a send that succeeded, it returns the next message, leased
// by the ack's commit, if one was visible then.
func (r *Relay) deliver(runCtx, sendCtx context.Context, i int, m *queue.Message) (*queue.Message, error) {
	r.hold(i, m.EnqueuedAt)
	defer r.hold(i, time.Time{})
	// The queue's own writes after the send must happen even when Run is
	// stopping: they are short local commits.
	local := context.WithoutCancel(runCtx)
	if runCtx.Err() != nil {
		return nil, r.settle(r.q.Defer(local, m, 0), &r.c.released)
	}
	if m.Attempt <= 1 {
		r.opts.Budget.Attempt()
	} else if !r.opts.Budget.TryRetry() {
		return nil, r.settle(r.q.Defer(local, m, r.retrier.Backoff(m.Attempt-1)), &r.c.budgetExhausted)
	} else {
		r.c.retried.Add(1)
	}
	err := r.sendBeating(sendCtx, local, m)
	if err == nil {
		r.c.backoff.Store(0)
		if runCtx.Err() != nil {
			// Stopping: lease nothing more, only to release it.
			return nil, r.settle(r.q.Ack(local, m), &r.c.sent)
		}
		next, err := r.q.AckAndPoll(local, m)
		return next, r.settle(err, &r.c.sent)
	}
	return nil, r.fail(sendCtx, local, m, err)
}

// fail settles m after a send that returned err: a nack, which releases
// it at once when the send was cut short by Run's stop.
func (r *Relay) fail(sendCtx, local context.Context, m *queue.Message, err error) error {
	if stopped := sendCtx.Err(); stopped != nil && errors.Is(err, stopped) {
		// Cut short by Run's stop, not the message's fault: nacked with
		// sendCtx, the queue releases it at once, never dead-lettered
		// (the attempt still counts: it may have reached the far side).
		return r.settle(r.q.Nack(sendCtx, m, err), &r.c.failed)
	}
	dead := retry.IsPermanent(err) || oncekv.IsPermanent(err) ||
		r.policy.MaxAttempts > 0 && m.Attempt >= r.policy.MaxAttempts
	nerr := r.q.Nack(local, m, err)
	if nerr == nil {
		// Counted once committed, so Stats never runs ahead of the queue.
		if dead {
			r.c.deadLettered.Add(1)
		} else {
			d := r.retrier.Ceiling(m.Attempt)
			if ra, ok := retry.RetryAfter(err); ok {
				d = max(d, min(ra, r.policy.MaxRetryAfter))
			}
			r.c.backoff.Store(int64(d))
		}
	}
	return r.settle(nerr, &r.c.failed)
}

// sendBeating calls send while a heartbeat keeps m's lease: every
// Options.Heartbeat it extends the lease by the queue's Visibility, and
// it cancels the send when the lease is lost or about to end unextended.
func (r *Relay) sendBeating(sendCtx, local context.Context, m *queue.Message) error {
	if r.opts.Heartbeat < 0 {
		return r.callSend(sendCtx, m)
	}
	ctx, cancel := context.WithCancelCause(sendCtx)
	defer cancel(nil)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		r.beat(local, m, stop, cancel)
	}()
	defer func() { close(stop); <-done }()
	return r.callSend(ctx, m)
}

// errLeaseLost cancels a send whose lease the heartbeat could not keep.
var errLeaseLost = errors.New("oncekv: relay: the message's lease was lost while it was being sent")

// beat extends m's lease every Options.Heartbeat until stop is closed.
// It extends a copy of m: the send reads m meanwhile.
func (r *Relay) beat(ctx context.Context, m *queue.Message, stop <-chan struct{}, lost context.CancelCauseFunc) {
	held := *m
	qo := r.q.Options()
	c, stopTimer := qo.Timer(r.opts.Heartbeat)
	defer func() { stopTimer() }()
	for {
		select {
		case <-stop:
			return
		case <-c:
		}
		// The next beat is counted from this one, not from the end of
		// the Extend's commit, so beats do not drift.
		c, stopTimer = qo.Timer(r.opts.Heartbeat)
		err := r.q.Extend(ctx, &held, qo.Visibility)
		switch {
		case err == nil:
			r.c.extended.Add(1)
		case errors.Is(err, oncekv.ErrFenced):
			lost(fmt.Errorf("%w: %w", errLeaseLost, err))
			return
		case !r.opts.Now().Add(r.opts.Heartbeat).Before(held.LeaseUntil):
			// The lease ends before the next beat: stop the send before
			// another worker may take the message.
			lost(fmt.Errorf("%w: %w", errLeaseLost, err))
			return
		}
	}
}

// callSend calls send under Options.SendTimeout.
func (r *Relay) callSend(ctx context.Context, m *queue.Message) error {
	if r.opts.SendTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.opts.SendTimeout)
		defer cancel()
	}
	return r.send(ctx, m)
}

// settle counts a committed ack, nack or defer in done, or a lost lease
// in Stats.Fenced, and lets the worker go on: another delivery owns the
// message then. Any other error stops the relay.
func (r *Relay) settle(err error, done *atomic.Uint64) error {
	switch {
	case err == nil:
		done.Add(1)
		return nil
	case errors.Is(err, oncekv.ErrFenced):
		r.c.fenced.Add(1)
		return nil
	}
	return err
}

func (r *Relay) hold(i int, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.held[i] = at
}

// fault is a panic or runtime.Goexit caught in a worker, to be raised again
// in Run's goroutine.
type fault struct {
	value  any
	goexit bool
}

func (f *fault) raise() {
	if f.goexit {
		runtime.Goexit()
	}
	panic(f.value)
}
