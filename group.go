package oncekv

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// group is the group commit of concurrent Apply calls. It knows nothing of
// transactions: what it does with a batch is groupEnv's business, so it is
// tested on its own, without a DB (group_internal_test.go).
//
// The first caller to arrive when no commit is running becomes the leader:
// it takes the write lock, takes every op queued by then, has them
// committed together and wakes their callers. Ops that arrive meanwhile
// queue up; when the leader is done, it promotes the first of them to lead
// the next commit. So a lone caller commits at once, and N concurrent
// callers share roughly one fsync per commit instead of N.
//
// A new leader may wait a little before taking the queue (see
// gatherLocked): at most a tenth of the last commit's duration, and only
// when the last commit carried more than one op.
//
// A caller whose context ends while it waits leaves the queue at once and
// applies nothing. A leader whose context ends while it waits for the write
// lock hands the lead to the next caller in the queue.
type group struct {
	env     groupEnv
	maxSize int // the most ops one commit takes, the leader's included

	mu struct {
		sync.Mutex
		// queue holds the callers waiting for a leader to take them, oldest
		// first. The leader is not in it.
		queue   []*op
		leading bool
		// last is the size of the last batch, and lastTook how long its
		// commit took; a new leader uses them to gather the callers of that
		// batch, who are about to come back (see gatherLocked).
		last     int
		lastTook time.Duration
	}
	// arrived is signalled, with mu, when the queue grows or a gathering
	// leader's time is up.
	arrived sync.Cond
	// batch is the leader's buffer, reused from one commit to the next.
	// Only the leader touches it, and it is cleared after each commit so
	// that no settled request stays reachable through it.
	batch []*op
}

// groupEnv is what the group commit needs from the store.
type groupEnv struct {
	// lock takes the write lock, or returns ctx's error when ctx ends
	// first; unlock releases it.
	lock   func(ctx context.Context) error
	unlock func()
	// commit decides every op of batch and settles it (o.settled), with
	// the write lock held. It must not run user code on the calling
	// goroutine in a way that could end it (see runEffect).
	commit func(batch []*op)
}

// errLeaderGone settles the ops of a batch whose leader's commit ended by
// a panic (a bug in oncekv; the leader's caller gets the panic) so that no
// follower waits for it forever.
var errLeaderGone = errors.New("oncekv: the group commit that took this request failed")

func (g *group) init(env groupEnv, maxSize int) {
	g.env, g.maxSize = env, maxSize
	g.arrived.L = &g.mu.Mutex
}

// submit runs o through the group commit and returns once o is settled:
// committed, failed, or given up because o.ctx ended while it waited.
func (g *group) submit(o *op) {
	g.mu.Lock()
	// A new leader was likely in the last batch, and the rest of that batch
	// is returning.
	want := g.mu.last
	if g.mu.leading {
		// Only a queued op is ever woken; a caller that leads at once
		// (the lone caller's fast path) makes no channel.
		o.wake = make(chan bool, 1)
		g.mu.queue = append(g.mu.queue, o)
		g.arrived.Broadcast()
		g.mu.Unlock()
		if !g.wait(o) {
			return
		}
		g.mu.Lock()
		// Promoted: the queue holds callers that were not in the last batch.
		want = 1 + len(g.mu.queue) + g.mu.last
	}
	g.mu.leading = true
	g.gatherLocked(want)
	g.mu.Unlock()
	g.lead(o)
}

// wait blocks a queued op until it is settled, or promoted to lead the next
// commit (it reports true then), or its context ends while it is still in
// the queue: it leaves the queue and is settled with the context's error.
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
	// A leader took o into its batch, or promoted it, before it could
	// leave: its answer is on the way.
	return !<-o.wake
}

// gatherLocked lets a new leader wait, briefly, until want callers (itself
// included) are there: the callers of the commit that just ended were woken
// a moment ago and are about to queue their next requests. Without waiting,
// concurrent callers fall into a rhythm where every other commit carries
// one request (or two cohorts take turns), and throughput halves. The wait
// ends as soon as they are queued, and never lasts longer than a tenth of
// the last commit, so it costs at most a tenth of the throughput even when
// nobody comes back. A lone caller never waits: the last batch was its own.
// The leader sleeps on g.arrived meanwhile; it does not spin.
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

// lead commits o together with the callers queued behind it, wakes them,
// and hands the lead on. Every exit path, a panic included, wakes every
// caller it took and hands the lead on, so nobody waits for a leader that
// is gone.
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
	// A commit of the leader's op alone runs its effect on this goroutine,
	// the op's own caller's: a runtime.Goexit in it ends only that caller,
	// whom nobody else waits for (see runEffect). With others in the batch,
	// every effect gets a goroutine of its own.
	for _, b := range batch {
		b.detached = len(batch) > 1
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
