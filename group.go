package oncekv

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// group is the group commit of concurrent Apply calls and claim steps. The
// first caller to arrive when no commit runs leads: it takes the write
// lock and every op queued by then, has them committed together through
// env, wakes their callers and promotes the next queued one. A caller whose
// context ends while queued leaves at once. It knows nothing of
// transactions, so it is tested without a DB (group_internal_test.go);
// see docs/design/group-commit.md.
type group struct {
	env     groupEnv
	maxSize int // the most ops one commit takes, the leader's included

	mu struct {
		sync.Mutex
		// queue holds the callers waiting for a leader, oldest first.
		queue   []*op
		leading bool
		// last and lastTook are the size and duration of the last commit,
		// for gatherLocked.
		last     int
		lastTook time.Duration
	}
	// arrived is signalled, with mu, when the queue grows or a gathering
	// leader's time is up.
	arrived sync.Cond
	// batch is the leader's buffer, cleared after each commit.
	batch []*op
}

// groupEnv is what the group commit needs from the store.
type groupEnv struct {
	// lock takes the write lock, or returns ctx's error when ctx ends
	// first; unlock releases it.
	lock   func(ctx context.Context) error
	unlock func()
	// commit decides and settles every op of batch, with the write lock
	// held, without ending the calling goroutine (see runEffect).
	commit func(batch []*op)
}

// errLeaderGone settles the ops of a batch whose leader's commit panicked,
// so that no follower waits forever.
var errLeaderGone = errors.New("oncekv: the group commit that took this request failed")

func (g *group) init(env groupEnv, maxSize int) {
	g.env, g.maxSize = env, maxSize
	g.arrived.L = &g.mu.Mutex
}

// submit runs o through the group commit and returns once o is settled:
// committed, failed, or given up because o.ctx ended while it waited.
func (g *group) submit(o *op) {
	g.mu.Lock()
	if g.mu.leading {
		// Only a queued op is woken, so the lone caller makes no channel.
		o.wake = make(chan bool, 1)
		g.enqueueLocked(o)
		g.mu.Unlock()
		g.await(o)
		return
	}
	g.mu.leading = true
	g.gatherLocked(g.mu.last)
	g.mu.Unlock()
	g.lead(o)
}

// post queues o without waiting for it, for the Applier: the goroutine
// that later calls await(o) leads o's commit if o is promoted, and o is
// promoted at once when no commit runs. Ops posted one after another are
// committed, and their effects run, in the order they were posted.
func (g *group) post(o *op) {
	o.wake, o.posted = make(chan bool, 1), true
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.mu.leading {
		g.mu.leading = true
		o.wake <- false
		return
	}
	g.enqueueLocked(o)
}

// enqueueLocked appends o to the queue and tells a gathering leader.
func (g *group) enqueueLocked(o *op) {
	g.mu.queue = append(g.mu.queue, o)
	g.arrived.Broadcast()
}

// await returns once a queued or posted o is settled, leading the commit o
// is promoted to, if it is.
func (g *group) await(o *op) {
	if !g.wait(o) {
		return
	}
	g.mu.Lock()
	// Promoted: the queue holds callers that were not in the last batch.
	g.gatherLocked(1 + len(g.mu.queue) + g.mu.last)
	g.mu.Unlock()
	g.lead(o)
}

// wait blocks a queued op until it is settled, promoted to lead (true), or
// its context ends while still queued: it then leaves the queue, settled
// with ctx's error.
func (g *group) wait(o *op) (promoted bool) {
	select {
	case done := <-o.wake:
		return !done
	case <-o.ctx.Done():
	}
	g.mu.Lock()
	if i := slices.Index(g.mu.queue, o); i >= 0 {
		g.mu.queue = slices.Delete(g.mu.queue, i, i+1)
		g.mu.Unlock()
		o.fail(outcomeAborted, o.ctx.Err())
		o.settled = true
		return false
	}
	g.mu.Unlock()
	// A leader took or promoted o before it could leave: wait for it.
	return !<-o.wake
}

// gatherLocked lets a new leader wait until want callers are queued (the
// last batch's callers are about to come back), at most a tenth of the last
// commit and only after a commit of more than one op, sleeping on arrived.
// Without it, throughput halves (docs/design/group-commit.md).
func (g *group) gatherLocked(want int) {
	if g.mu.last <= 1 || 1+len(g.mu.queue) >= want {
		return
	}
	expired := false
	t := time.AfterFunc(g.mu.lastTook/10, func() {
		g.mu.Lock()
		expired = true
		g.mu.Unlock()
		g.arrived.Broadcast()
	})
	defer t.Stop()
	for !expired && 1+len(g.mu.queue) < want {
		g.arrived.Wait()
	}
}

// lead commits o with the callers queued behind it, wakes them and hands
// the lead on, on every exit path, a panic included.
func (g *group) lead(o *op) {
	batch := g.batch[:0]
	committed := false
	var took time.Duration
	defer func() {
		for _, b := range batch {
			if b == o {
				continue
			}
			if !b.settled {
				b.fail(outcomeAborted, errLeaderGone)
				b.settled = true
			}
			b.wake <- true
		}
		clear(batch)
		g.batch = batch[:0]
		g.mu.Lock()
		if committed {
			g.mu.last, g.mu.lastTook = len(batch), took
		}
		g.handOffLocked()
		g.mu.Unlock()
	}()
	if err := g.env.lock(o.ctx); err != nil {
		o.fail(outcomeAborted, err)
		o.settled = true
		return
	}
	defer g.env.unlock() // runs before the wake-ups above
	g.mu.Lock()
	n := min(len(g.mu.queue), g.maxSize-1)
	batch = append(batch, o)
	batch = append(batch, g.mu.queue[:n]...)
	g.mu.queue = slices.Delete(g.mu.queue, 0, n) // zeroes the slots it vacates
	g.mu.Unlock()
	// A lone op's effect runs on its caller's goroutine; with others in the
	// batch each effect gets its own (see runEffect).
	// A posted op's caller is not the goroutine leading: it always gets one.
	for _, b := range batch {
		b.detached = len(batch) > 1 || b.posted
	}

	began := time.Now()
	g.env.commit(batch)
	took, committed = time.Since(began), true
}

// handOffLocked promotes the first queued caller to lead the next commit,
// or ends the leading when nobody is queued.
func (g *group) handOffLocked() {
	if len(g.mu.queue) == 0 {
		g.mu.leading = false
		return
	}
	next := g.mu.queue[0]
	g.mu.queue = slices.Delete(g.mu.queue, 0, 1)
	next.wake <- false
}
