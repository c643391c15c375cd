package queue

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/retry"
)

// Defaults of Options' fields.
const (
	DefaultVisibility  = 30 * time.Second
	DefaultMaxBodySize = 1 << 20
	// MaxOpenQueues bounds the queues open at once in a process (the
	// registry that lets Open find an open queue is keyed by their names).
	MaxOpenQueues = 1024
	// maxNameLen bounds a queue name, so bucket names stay short.
	maxNameLen = 64
)

// FullPolicy says what Enqueue does when the queue is full.
type FullPolicy int

const (
	// Reject refuses the message with ErrFull: the producer decides.
	Reject FullPolicy = iota
	// DropOldest deletes the oldest messages (live or dead, lowest ID
	// first) until the new one fits, and counts them in Stats.Dropped.
	DropOldest
)

// DeadHeadPolicy says what a dead-lettered message does to the later
// messages of its ordering key.
type DeadHeadPolicy int

const (
	// HoldOrderingKey keeps the key's later messages back until the dead
	// letter is redriven (it goes back at the head, with its ID) or
	// deleted: the far side never sees edit-3 of a note before edit-2.
	// The default: right for edits, ledgers and anything whose order
	// matters more than its latency.
	HoldOrderingKey DeadHeadPolicy = iota
	// PassOrderingKey lets the key's next message through at once, as if
	// the dead letter had been acked; a redrive puts it behind the key's
	// messages of the time.
	PassOrderingKey
)

// Options configures a queue. Pass nil to Open for all defaults; a zero
// field takes its default. Open works on a copy.
type Options struct {
	// Visibility is the lease a Receive takes: the message stays invisible
	// to other receivers that long, unless extended, acked or nacked.
	// Default 30s.
	Visibility time.Duration

	// Retry is the nack policy: the backoff (full jitter between 0 and
	// min(Cap, Base×2^(attempt-1))), Retry-After floors and MaxAttempts
	// (deliveries before a message is dead-lettered). nil: retry's
	// defaults (Base 1s, Cap 5m, MaxAttempts 10). Its Now, Sleep and
	// Budget are not used: the queue reads the store's clock.
	Retry *retry.Policy

	// MaxMessages bounds the messages the queue holds, dead letters
	// included. Default 0: no bound.
	MaxMessages int

	// MaxBytes bounds the sum of the keys, ordering keys and bodies the
	// queue holds, dead letters included. Default 0: no bound.
	MaxBytes int64

	// MaxBodySize bounds one body. Default 1 MiB.
	MaxBodySize int

	// WhenFull is what Enqueue does when MaxMessages or MaxBytes would be
	// exceeded. Default Reject.
	WhenFull FullPolicy

	// DeadHead is what a dead-lettered message does to the later messages
	// of its ordering key. Default HoldOrderingKey. A key held when the
	// queue is opened with PassOrderingKey stays held until its dead
	// letter is redriven or deleted.
	DeadHead DeadHeadPolicy

	// KeepOrphanedLeases keeps, until they run out, the leases found at
	// Open. One process writes the store, so a lease taken before this
	// Open belongs to a process that is gone (or to a closed Queue of
	// this one), and by default it is released at once: the message is
	// visible again, its interrupted delivery counted as an attempt (so a
	// message that crashes its consumer every time is dead-lettered after
	// MaxAttempts). What the far side answered the interrupted attempt
	// (a Retry-After) died with the process, so the message is sent again
	// at once. Set it to wait the leases out instead: an operator's tool
	// that must change nothing it was not asked to, or a far side whose
	// Retry-After must hold across crashes (up to the Visibility). Default
	// false.
	KeepOrphanedLeases bool

	// Timer waits for a delayed message on the store's clock: it returns a
	// channel that receives once d has passed, and a function that stops
	// it. Default: time.NewTimer's. Tests that inject oncekv.Options.Now
	// inject a Timer driven by the same fake clock.
	Timer func(d time.Duration) (<-chan time.Time, func() bool)
}

func (o *Options) withDefaults() (Options, *retry.Retrier, error) {
	var c Options
	if o != nil {
		c = *o
	}
	var errs []error
	if c.Visibility == 0 {
		c.Visibility = DefaultVisibility
	}
	if c.Visibility < 0 {
		errs = append(errs, fmt.Errorf("Options.Visibility %v is negative", c.Visibility))
	}
	if c.MaxBodySize == 0 {
		c.MaxBodySize = DefaultMaxBodySize
	}
	if c.MaxBodySize < 0 {
		errs = append(errs, fmt.Errorf("Options.MaxBodySize %d is negative", c.MaxBodySize))
	}
	if c.MaxMessages < 0 {
		errs = append(errs, fmt.Errorf("Options.MaxMessages %d is negative", c.MaxMessages))
	}
	if c.MaxBytes < 0 {
		errs = append(errs, fmt.Errorf("Options.MaxBytes %d is negative", c.MaxBytes))
	}
	if c.WhenFull != Reject && c.WhenFull != DropOldest {
		errs = append(errs, fmt.Errorf("Options.WhenFull %d is unknown", c.WhenFull))
	}
	if c.DeadHead != HoldOrderingKey && c.DeadHead != PassOrderingKey {
		errs = append(errs, fmt.Errorf("DeadHead %d is unknown", c.DeadHead))
	}
	if c.Timer == nil {
		c.Timer = func(d time.Duration) (<-chan time.Time, func() bool) {
			t := time.NewTimer(d)
			return t.C, t.Stop
		}
	}
	var policy *retry.Policy
	if c.Retry != nil {
		// The budget is the relay's to ask before a retry is sent; a
		// Nack spending from it too would charge each retry twice.
		p := *c.Retry
		p.Budget = nil
		policy = &p
	}
	r, err := retry.New(policy)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return c, nil, fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	return c, r, nil
}

// same reports whether two queues' options agree, for a second Open.
func (o *Options) same(p *Options, a, b *retry.Retrier) bool {
	pa, pb := a.Policy(), b.Policy()
	return o.Visibility == p.Visibility && o.MaxMessages == p.MaxMessages &&
		o.MaxBytes == p.MaxBytes && o.MaxBodySize == p.MaxBodySize && o.WhenFull == p.WhenFull &&
		o.DeadHead == p.DeadHead && o.KeepOrphanedLeases == p.KeepOrphanedLeases &&
		pa.Base == pb.Base && pa.Cap == pb.Cap && pa.MaxAttempts == pb.MaxAttempts && pa.MaxRetryAfter == pb.MaxRetryAfter
}

// Queue is a named queue in an open store. It is safe for concurrent use.
type Queue struct {
	db      *oncekv.DB
	name    string
	opts    Options
	retrier *retry.Retrier
	b       buckets
	handler string // of the enqueue marks
	fence   string // the resource of the lease tokens
	// readOnly: the store was opened read-only; every write is refused
	// with oncekv.ErrReadOnly before it begins.
	readOnly bool

	mu struct {
		sync.Mutex
		refs   int
		closed bool
		// wake is closed (and replaced) when something may have become
		// visible: every waiting Receive holds the channel it saw before
		// looking.
		wake chan struct{}
		// changed is closed (and replaced) at every commit that changed
		// what the queue holds (see Changed).
		changed chan struct{}
	}
	reader   View // the read calls
	counters counters
	batch    batcher // of Receive, Ack and Extend
}

type counters struct {
	enqueued, duplicates, acked, nacked, expired, deadLettered, redriven, dropped atomic.Uint64
}

// registry finds an open queue by store and name, so two Opens of one
// queue share its wake-ups and counters. At most MaxOpenQueues entries.
var registry = struct {
	sync.Mutex
	open map[regKey]*Queue
}{open: map[regKey]*Queue{}}

type regKey struct {
	db   *oncekv.DB
	name string
}

// Open returns the queue name in db, creating its buckets on first use.
// opts may be nil for defaults. Opening a queue that is already open in
// this process returns the same *Queue if the options agree
// (ErrConflictingOptions if not); each Open needs its own Close.
//
// The first Open of a queue in a process releases the leases an earlier
// process left (see Options.KeepOrphanedLeases). On a store opened
// read-only, the queue must exist: its read calls (Stats, Messages,
// DeadLetters, ...) work, and every write returns oncekv.ErrReadOnly.
//
// Errors: ErrNilDB, ErrInvalidName, ErrInvalidOptions,
// ErrConflictingOptions, ErrTooManyQueues, ErrNoQueue (read-only, and no
// such queue), the store's.
func Open(db *oncekv.DB, name string, opts *Options) (*Queue, error) {
	if err := checkName(name); err != nil {
		return nil, &Error{Op: "open", Queue: clip(name), Err: err}
	}
	if db == nil {
		return nil, &Error{Op: "open", Queue: name, Err: ErrNilDB}
	}
	o, r, err := opts.withDefaults()
	if err != nil {
		return nil, &Error{Op: "open", Queue: name, Err: err}
	}
	registry.Lock()
	defer registry.Unlock()
	if q := registry.open[regKey{db, name}]; q != nil {
		if !q.opts.same(&o, q.retrier, r) {
			return nil, &Error{Op: "open", Queue: name, Err: ErrConflictingOptions}
		}
		q.mu.Lock()
		q.mu.refs++
		q.mu.Unlock()
		return q, nil
	}
	if len(registry.open) >= MaxOpenQueues {
		return nil, &Error{Op: "open", Queue: name, Err: ErrTooManyQueues}
	}
	q := &Queue{db: db, name: name, opts: o, retrier: r, b: newBuckets(name),
		handler: "oncekv.queue." + name, fence: "oncekv.queue." + name}
	q.reader = View{db: db, name: name, b: q.b}
	q.mu.refs, q.mu.wake, q.mu.changed = 1, make(chan struct{}), make(chan struct{})
	q.batch.run = db.Update
	err = db.Update(q.setUp)
	if errors.Is(err, oncekv.ErrReadOnly) {
		q.readOnly = true
		err = db.View(func(otx *oncekv.Tx) error { return q.b.exist(otx) })
	}
	if err != nil {
		return nil, q.wrap("open", nil, err)
	}
	registry.open[regKey{db, name}] = q
	return q, nil
}

// setUp is the first Open's transaction: it creates the buckets, builds
// the side indexes of a file written before them, and releases the
// leases of an earlier process.
func (q *Queue) setUp(otx *oncekv.Tx) error {
	if err := q.b.create(otx); err != nil {
		return err
	}
	t, err := q.begin(otx)
	if err != nil {
		return err
	}
	if t.counter("layout") < layoutVersion {
		if err := t.rebuildSides(); err != nil {
			return err
		}
	}
	// Every lease token issued from now on is above this one: a lease
	// with a smaller token was taken before this Open.
	line, err := otx.NextFence(q.fence)
	if err != nil || q.opts.KeepOrphanedLeases {
		return err
	}
	return t.releaseLeases(line)
}

// checkName refuses names that would make odd bucket names.
func checkName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("%w: %d bytes, want 1 to %d", ErrInvalidName, len(name), maxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: byte %q at %d", ErrInvalidName, c, i)
		}
	}
	return nil
}

// Policy returns the queue's retry policy, defaults filled in: the backoff,
// Retry-After cap and MaxAttempts that Nack applies. A relay reads it so
// that its own waits follow the same rules.
func (q *Queue) Policy() retry.Policy { return q.retrier.Policy() }

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// Options returns the queue's options, defaults filled in (Retry is a
// copy of the policy Policy returns): a relay reads Visibility and Timer
// so that its heartbeats keep a lease on the queue's clock.
func (q *Queue) Options() Options {
	o := q.opts
	p := q.retrier.Policy()
	o.Retry = &p
	return o
}

// DB returns the store the queue lives in: its clock (DB.Now) is the one
// the queue's timers and leases run on.
func (q *Queue) DB() *oncekv.DB { return q.db }

// Close releases this Open of the queue; once every Open is closed, its
// waiting and later calls return ErrQueueClosed. The store stays open and
// the messages stay in it. Closing more often than opening is not an error.
func (q *Queue) Close() error {
	registry.Lock()
	defer registry.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.closed {
		return nil
	}
	q.mu.refs--
	if q.mu.refs > 0 {
		return nil
	}
	q.mu.closed = true
	close(q.mu.wake)
	close(q.mu.changed)
	delete(registry.open, regKey{q.db, q.name})
	return nil
}

// notify wakes the watchers of Changed and WaitDrained: a commit changed
// what the queue holds.
func (q *Queue) notify() { q.broadcast(&q.mu.changed) }

// broadcast closes the channel *ch and replaces it, waking every waiter
// that holds it; after Close, every channel is closed already.
func (q *Queue) broadcast(ch *chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.closed {
		return
	}
	close(*ch)
	*ch = make(chan struct{})
}

// waitChan returns the channel the next wake-up closes, or an error once
// the queue is closed.
func (q *Queue) waitChan() (<-chan struct{}, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.closed {
		return nil, ErrQueueClosed
	}
	return q.mu.wake, nil
}

// wakeAll wakes every waiting Receive: something may have become visible.
func (q *Queue) wakeAll() { q.broadcast(&q.mu.wake) }

func (q *Queue) checkOpen() error {
	_, err := q.waitChan()
	return err
}

// checkWritable is checkOpen for a call that writes: on a read-only store
// it fails before any transaction begins.
func (q *Queue) checkWritable() error {
	if err := q.checkOpen(); err != nil {
		return err
	}
	if q.readOnly {
		return fmt.Errorf("%w: the queue's store was opened read-only", oncekv.ErrReadOnly)
	}
	return nil
}
