package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/fakeclock"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
	"github.com/oncekv/oncekv/retry"
)

// The outbox story's numbers.
const (
	outboxOrders      = 20
	outboxRetryAfter  = 30 * time.Second
	outboxOutage      = 3 * time.Minute
	outboxBudgetRatio = 0.1
	outboxBudgetFloor = 0.1 // retries per second
	outboxBudgetSpan  = 10 * time.Second
)

// outboxStory relays an outbox to an HTTP receiver on a fake clock: an
// outage answered with 503 and Retry-After, the retry budget holding the
// rate down, recovery, a poison order dead-lettered and redriven, and the
// receiver applying each order once.
func (d *demo) outboxStory() error {
	dir, err := os.MkdirTemp("", "kvdemo-outbox")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	clock := fakeclock.NewTimers(time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC))
	db, err := oncekv.Open(filepath.Join(dir, "outbox.db"), &oncekv.Options{Now: clock.Now, NoSync: true})
	if err != nil {
		return err
	}
	defer db.Close()
	rcv := &receiver{db: db}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	s := &outboxRun{d: d, db: db, clock: clock, rcv: rcv}
	return s.steps(srv.URL)
}

// receiver is the far side: it applies each order once, keyed by its
// Idempotency-Key, and can be down or reject a poison order.
type receiver struct {
	db       *oncekv.DB
	down     atomic.Bool
	fixed    atomic.Bool // the poison order's bug is fixed
	requests atomic.Int64
	mu       sync.Mutex
	during   []bool // per request while down: is it a retry
	seen     map[string]bool
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc.requests.Add(1)
	key := r.Header.Get("Idempotency-Key")
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	rc.mu.Lock()
	if rc.seen == nil {
		rc.seen = map[string]bool{}
	}
	if rc.down.Load() {
		rc.during = append(rc.during, rc.seen[key])
	}
	rc.seen[key] = true
	rc.mu.Unlock()
	switch {
	case rc.down.Load():
		w.Header().Set("Retry-After", fmt.Sprint(int(outboxRetryAfter.Seconds())))
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	case string(body) == "poison" && !rc.fixed.Load():
		w.WriteHeader(http.StatusUnprocessableEntity)
		return
	}
	_, err = rc.db.Apply(r.Context(), oncekv.Request{Handler: "receiver", Key: key, Payload: body},
		func(tx *oncekv.Tx) ([]byte, error) {
			b, err := tx.CreateBucketIfNotExists([]byte("received"))
			if err != nil {
				return nil, err
			}
			n := readRuns(b.Get([]byte(key))) + 1
			return nil, b.Put([]byte(key), binary.BigEndian.AppendUint64(nil, n))
		})
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

// outboxRun is one telling of the story.
type outboxRun struct {
	d     *demo
	db    *oncekv.DB
	clock *fakeclock.Timers
	rcv   *receiver
	q     *queue.Queue
	r     *relay.Relay
}

func (s *outboxRun) steps(url string) error {
	d, ctx := s.d, context.Background()
	d.printf("\n%d. Outbox relay over HTTP: an outage with Retry-After, the retry budget, a poison order (separate store)\n", d.step())
	q, err := queue.Open(s.db, "orders-out", &queue.Options{Timer: s.clock.Timer,
		Retry: &retry.Policy{Base: time.Second, Cap: time.Minute, MaxAttempts: -1}})
	if err != nil {
		return err
	}
	defer q.Close()
	s.q = q
	for i := range outboxOrders {
		key := fmt.Sprintf("order-%02d", i+1)
		_, err := s.db.Apply(ctx, oncekv.Request{Handler: "checkout", Key: key, Payload: []byte(key)},
			func(tx *oncekv.Tx) ([]byte, error) {
				_, err := q.EnqueueTx(tx, queue.Message{Key: key, Body: []byte(key)})
				return nil, err
			})
		if err != nil {
			return err
		}
	}
	d.printf("   %d orders recorded, each with its outbox entry in the same transaction (Apply + EnqueueTx)\n", outboxOrders)

	send, err := relay.HTTPSender(nil, http.MethodPost, url, &relay.HTTPOptions{Now: s.clock.Now})
	if err != nil {
		return err
	}
	budget, err := retry.NewBudget(&retry.BudgetOptions{Window: outboxBudgetSpan, Ratio: outboxBudgetRatio,
		MinPerSecond: outboxBudgetFloor, Now: s.clock.Now})
	if err != nil {
		return err
	}
	s.r, err = relay.New(q, send, &relay.Options{Workers: 2, Budget: budget, Now: s.clock.Now})
	if err != nil {
		return err
	}
	// The receiver is down before the relay starts: a worker quicker than
	// the story would otherwise deliver an order or two before the outage.
	s.rcv.down.Store(true)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.r.Run(runCtx) }()
	err = errors.Join(s.outage(), s.recovery(), s.poison())
	stop()
	return errors.Join(err, <-done)
}

// outage: the receiver answers 503 with Retry-After for three minutes.
func (s *outboxRun) outage() error {
	d := s.d // the receiver went down before the relay started (see steps)
	if err := s.advance(outboxOutage, time.Second); err != nil {
		return err
	}
	s.rcv.down.Store(false)
	s.rcv.mu.Lock()
	firsts, retries := 0, 0
	for _, again := range s.rcv.during {
		if again {
			retries++
		} else {
			firsts++
		}
	}
	s.rcv.mu.Unlock()
	st := s.r.Stats()
	// Without a budget every order would retry each Retry-After.
	unbudgeted := outboxOrders * int(outboxOutage/outboxRetryAfter)
	bound := int(2*outboxBudgetRatio*float64(firsts) + outboxBudgetFloor*(outboxOutage+outboxBudgetSpan).Seconds())
	d.printf("   receiver down %v, 503 Retry-After %v: %d first attempts, %d retries (budget allows %d; %d without one)  %s\n",
		outboxOutage, outboxRetryAfter, firsts, retries, bound, unbudgeted,
		d.check(firsts == outboxOrders && retries <= bound && retries < unbudgeted))
	d.printf("   retries the budget held back (waiting, no attempt counted): %d, dead letters: %d  %s\n",
		st.BudgetExhausted, st.DeadLettered, d.check(st.BudgetExhausted > 0 && st.DeadLettered == 0))
	return nil
}

// recovery: the receiver is back; every order arrives, applied once.
func (s *outboxRun) recovery() error {
	if err := s.until(func(st queue.Stats) bool { return st.Depth == 0 }); err != nil {
		return err
	}
	applied, err := s.applied()
	if err != nil {
		return err
	}
	once := len(applied) == outboxOrders
	for _, n := range applied {
		once = once && n == 1
	}
	s.d.printf("   receiver back: %d orders delivered, each applied once by the receiver  %s\n", len(applied), s.d.check(once))
	return nil
}

// poison: an order the receiver rejects with 422 is dead-lettered at once,
// and after the fix a redrive delivers it with the same key.
func (s *outboxRun) poison() error {
	d, ctx := s.d, context.Background()
	if _, err := s.q.Enqueue(ctx, queue.Message{Key: "order-poison", Body: []byte("poison")}); err != nil {
		return err
	}
	if err := s.until(func(st queue.Stats) bool { return st.Dead == 1 }); err != nil {
		return err
	}
	dead, err := s.q.DeadLetters(0, 1)
	if err != nil || len(dead) != 1 {
		return errors.Join(err, errors.New("kvdemo: the poison order was not dead-lettered"))
	}
	poisoned := dead[0].Attempt == 1
	s.rcv.fixed.Store(true)
	if _, err := s.q.Redrive(ctx, dead[0].ID); err != nil {
		return err
	}
	if err := s.until(func(st queue.Stats) bool { return st.Depth == 0 && st.Dead == 0 }); err != nil {
		return err
	}
	applied, err := s.applied()
	if err != nil {
		return err
	}
	d.printf("   order-poison got 422: dead-lettered at attempt %d; fixed, redriven with its key, applied %d time(s)  %s\n",
		dead[0].Attempt, applied["order-poison"],
		d.check(poisoned && applied["order-poison"] == 1 && len(applied) == outboxOrders+1 && s.r.Stats().DeadLettered == 1))
	return nil
}

// advance moves the clock by total in steps, letting the relay finish
// what each step made visible.
func (s *outboxRun) advance(total, step time.Duration) error {
	for moved := time.Duration(0); moved < total; moved += step {
		if err := s.settle(); err != nil {
			return err
		}
		s.clock.Advance(step)
	}
	return s.settle()
}

// until moves the clock a second at a time until done holds.
func (s *outboxRun) until(done func(queue.Stats) bool) error {
	for range 3600 {
		if err := s.settle(); err != nil {
			return err
		}
		st, err := s.q.Stats()
		if err != nil {
			return err
		}
		if done(st) {
			return nil
		}
		s.clock.Advance(time.Second)
	}
	return errors.New("kvdemo: the outbox did not settle within an hour of story time")
}

// settle waits (in real time) until the relay's workers hold nothing and
// nothing is visible: the story's clock may move on. The relay's Holding
// drops only after its counters moved, so what the story prints next is
// settled too. The bound is generous: a loaded machine running the demo
// under the race detector is slow, not stuck.
func (s *outboxRun) settle() error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		st, err := s.q.Stats()
		if err != nil {
			return err
		}
		if st.Ready == 0 && st.InFlight == 0 && s.r.Stats().Holding == 0 {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return errors.New("kvdemo: the relay did not settle")
}

// applied reads how many times the receiver applied each key.
func (s *outboxRun) applied() (map[string]uint64, error) {
	m := map[string]uint64{}
	err := s.db.View(func(tx *oncekv.Tx) error {
		b := tx.Bucket([]byte("received"))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			m[string(k)] = readRuns(v)
			return nil
		})
	})
	return m, err
}
