package oncekvtest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/oncekv/oncekv"
)

// epoch is where the reference run's clock starts; the duplicated run's
// starts Spec.ClockSkew later.
var epoch = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// tick is how far a run's clock moves at every attempt of a delivery.
const tick = time.Second

// maxTransient is how many transient errors (Classify: retry now or
// later) one delivery gets before it is left unacked, as a consumer out of
// attempts would leave it.
const maxTransient = 3

// errRollback is what the checker's wrapper returns after the user's
// effect, to roll an attempt back as a crash before the commit would.
var errRollback = errors.New("oncekvtest: attempt rolled back by the checker")

// crashSignal is the panic value of the checker's OnCommit hook: Apply
// raises it after the commit, and the hooks registered after it do not
// run, as after a crash right after the commit.
type crashSignal struct{}

// boundary is what happens at the effect's boundary of one attempt. nil
// fields do nothing.
type boundary struct {
	// inEffect runs after the user's effect returned without error,
	// before the commit; an error it returns rolls the attempt back.
	inEffect func() error
	// afterCommit is the first OnCommit hook of the attempt.
	afterCommit func()
}

// clock is a run's injected clock: it moves only when told to.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.set(t)
	return c
}

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) set(t time.Time)         { c.ns.Store(t.UnixNano()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// requestID identifies a request for the key-stability check: what makes
// two deliveries the same operation to the store.
type requestID struct {
	handler, key string
	content      [sha256.Size]byte // of the Fingerprint, or else the Payload
}

func idOf(req *oncekv.Request) requestID {
	content := req.Payload
	if len(req.Fingerprint) > 0 {
		content = append([]byte("fingerprint:"), req.Fingerprint...)
	}
	return requestID{handler: req.Handler, key: req.Key, content: sha256.Sum256(content)}
}

// keyChange is the first delivery whose request differs from the first
// request of the same message.
type keyChange struct {
	msg         int
	field       string // "handler", "key" or "payload"
	first, then oncekv.Request
}

// run is one store being delivered to.
type run[M any] struct {
	spec   *Spec[M]
	msgs   []M
	db     *oncekv.DB
	env    *Env
	effect Effect[M]
	clock  *clock
	tick   time.Duration

	seen   map[int]requestID // per message of S: at most len(msgs) entries
	change *keyChange
	log    []string // one line per attempt: at most deliveries*(maxTransient+2)
}

// openRun opens a store in dir (the file store.db, Env.Dir dir/files,
// both kept if they exist) on a clock at start moving tick per attempt,
// and builds the handler on it.
func openRun[M any](s *Spec[M], msgs []M, dir string, start time.Time, tick time.Duration) (*run[M], error) {
	files := filepath.Join(dir, "files")
	if err := os.MkdirAll(files, 0o700); err != nil {
		return nil, fmt.Errorf("oncekvtest: %w", err)
	}
	r := &run[M]{spec: s, msgs: msgs, clock: newClock(start), tick: tick, seen: map[int]requestID{}}
	db, err := oncekv.Open(filepath.Join(dir, "store.db"), r.storeOptions())
	if err != nil {
		return nil, fmt.Errorf("oncekvtest: open the store: %w", err)
	}
	r.db = db
	r.env = &Env{DB: db, Dir: files}
	if r.effect, err = s.open(r.env); err != nil {
		return nil, errors.Join(err, r.abandon()) // what Open registered is closed too
	}
	return r, nil
}

// storeOptions is Spec.Store with the checker's clock, no fsync and no
// background expiry.
func (r *run[M]) storeOptions() *oncekv.Options {
	var o oncekv.Options
	if r.spec.Store != nil {
		o = *r.spec.Store
	}
	o.Now = r.clock.now
	o.NoSync = true
	o.ExpireInterval = -1
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &o
}

// deliver delivers message d.Msg as delivery number n until it is acked
// (applied, a duplicate, or given up on: a bad or failed message) or out
// of transient attempts; at gives each attempt its boundary. A rolled-back
// attempt and a crash after a commit are delivered again. It fails only
// when the store can no longer serve (Classify says reopen).
func (r *run[M]) deliver(ctx context.Context, n int, d delivery, at func(attempt int) boundary) error {
	m := r.msgs[d.Msg]
	transient := 0
	for attempt := 0; ; attempt++ {
		r.clock.advance(r.tick)
		req := r.spec.Request(m)
		r.noteRequest(d.Msg, &req)
		res, err, crashed := r.apply(ctx, &req, m, at(attempt))
		what := fmt.Sprintf("#%d m%d (handler %q, key %q)", n, d.Msg, req.Handler, req.Key)
		switch {
		case crashed:
			r.note("%s: committed, then a crash before the ack; delivered again", what)
			continue
		case errors.Is(err, errRollback):
			r.note("%s: the effect ran, then rolled back as in a crash before the commit; delivered again", what)
			continue
		}
		switch oncekv.Classify(err).Action {
		case oncekv.Ack:
			if res.Duplicate {
				r.note("%s: duplicate", what)
			} else {
				r.note("%s: applied", what)
			}
			return nil
		case oncekv.GiveUp:
			r.note("%s: given up: %v", what, err)
			return nil
		case oncekv.Reopen:
			return fmt.Errorf("oncekvtest: delivery %s: the store cannot serve: %w", what, err)
		}
		if transient++; transient == maxTransient {
			r.note("%s: left unacked after %d transient errors: %v", what, transient, err)
			return nil
		}
		r.note("%s: transient error, delivered again: %v", what, err)
	}
}

// apply runs one attempt. crashed reports the checker's own crash after
// the commit; any other panic goes on up.
func (r *run[M]) apply(ctx context.Context, req *oncekv.Request, m M, b boundary) (res oncekv.Result, err error, crashed bool) {
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(crashSignal); !ok {
				panic(p)
			}
			crashed = true
		}
	}()
	res, err = r.db.Apply(ctx, *req, func(tx *oncekv.Tx) ([]byte, error) {
		if b.afterCommit != nil {
			tx.OnCommit(b.afterCommit)
		}
		resp, err := r.effect(tx, m)
		if err == nil && b.inEffect != nil {
			if err := b.inEffect(); err != nil {
				return nil, err
			}
		}
		return resp, err
	})
	return res, err, false
}

// noteRequest remembers the first request of each message and the first
// delivery whose request differs from it.
func (r *run[M]) noteRequest(msg int, req *oncekv.Request) {
	id := idOf(req)
	first, ok := r.seen[msg]
	if !ok {
		r.seen[msg] = id
		return
	}
	if r.change != nil || first == id {
		return
	}
	field := "payload"
	switch {
	case first.handler != id.handler:
		field = "handler"
	case first.key != id.key:
		field = "key"
	}
	// The first request, as a request: enough to show what changed.
	r.change = &keyChange{msg: msg, field: field,
		first: oncekv.Request{Handler: first.handler, Key: first.key}, then: *req}
}

func (r *run[M]) note(format string, args ...any) {
	r.log = append(r.log, fmt.Sprintf(format, args...))
}

// finish runs the OnClose functions, takes the snapshot and closes the
// store.
func (r *run[M]) finish() (State, error) {
	cerr := r.env.close()
	if cerr != nil {
		cerr = fmt.Errorf("oncekvtest: an OnClose function: %w", cerr)
	}
	st, err := r.spec.Snapshot(r.env)
	if err != nil {
		err = fmt.Errorf("oncekvtest: Snapshot: %w", err)
	}
	return st, errors.Join(cerr, err, r.db.Close())
}

// abandon runs the OnClose functions and closes the store, without a
// snapshot, after an error.
func (r *run[M]) abandon() error {
	if r.env == nil {
		return r.db.Close()
	}
	return errors.Join(r.env.close(), r.db.Close())
}
