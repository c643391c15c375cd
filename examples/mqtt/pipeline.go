package mqtt

import (
	"context"
	"sync"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/examples/internal/reading"
	"github.com/oncekv/oncekv/retry"
)

// Pipeline is the consumer's delivery handler: its Handle, a
// paho.MessageHandler, submits each message to one oncekv.Applier and
// returns without waiting for the commit, so the messages paho delivers
// while one commit runs share the next one; each message is acked only
// after the commit that decided it. Consume runs one; a program with its
// own paho client can install Handle as its handler instead.
//
// Acks, and the OnResult calls before them, come on one goroutine of the
// Pipeline, in the order the messages were handed to Handle, as MQTT asks
// of QoS 1 acknowledgements. A message whose first attempt failed
// transiently (a key another worker's claim holds, a busy or full store)
// is retried there with a synchronous Apply and the Retry backoff, and is
// acked only once that commits; the acks of the messages behind it wait,
// their commits do not.
type Pipeline struct {
	ctx     context.Context
	db      *oncekv.DB
	r       *retry.Retrier
	budget  *retry.Budget // o.Retry's, if any
	handler string
	on      func(key string, res oncekv.Result, err error, acked bool)
	a       *oncekv.Applier
	// acks carries every handled message to ack, in Handle's order.
	acks chan *delivery
	// ackerDone is closed when the acking goroutine has ended.
	ackerDone chan struct{}

	mu     sync.Mutex
	closed bool // acks is closed, or about to be
}

// delivery is one message on its way to its ack.
type delivery struct {
	m    paho.Message
	key  string
	rd   reading.Reading
	res  oncekv.Result
	err  error
	done chan struct{} // closed once res and err are the first attempt's
	// final: err is not the store's answer (a bad payload, or ctx ended or
	// the store closed before Submit took it): no retry.
	final bool
}

// NewPipeline returns a Pipeline applying messages to db with o's
// Handler, Retry, MaxInFlight and OnResult (it needs no broker: Broker,
// ClientID, Topic and Subscribed are Consume's). ctx bounds the applies
// and their retries: a message handled after it ended is not acked. Close
// it to wait for the messages in flight. It fails for a bad o.Retry, and
// with oncekv.ErrClosed when db is closed.
func NewPipeline(ctx context.Context, db *oncekv.DB, o ConsumerOptions) (*Pipeline, error) {
	if o.Handler == "" {
		o.Handler = "mqtt-readings"
	}
	r, err := retry.New(o.Retry)
	if err != nil {
		return nil, err
	}
	n := o.MaxInFlight
	if n <= 0 {
		n = oncekv.DefaultMaxInFlight
	}
	a, err := db.NewApplier(oncekv.ApplierOptions{MaxInFlight: n})
	if err != nil {
		return nil, err
	}
	var budget *retry.Budget
	if o.Retry != nil {
		budget = o.Retry.Budget
	}
	p := &Pipeline{
		ctx: ctx, db: db, r: r, budget: budget, handler: o.Handler, on: o.OnResult, a: a,
		acks: make(chan *delivery, n), ackerDone: make(chan struct{}),
	}
	go p.ack()
	return p, nil
}

// Handle takes one message: it submits its reading to the store and
// returns, blocking only while MaxInFlight messages wait for their commit
// or their ack. A payload that is not a reading is acked (in its turn)
// without touching the store, since no redelivery can fix it; a message
// handled after Close is not acked, and its OnResult reports
// oncekv.ErrClosed.
func (p *Pipeline) Handle(_ paho.Client, m paho.Message) {
	d := &delivery{m: m, done: make(chan struct{})}
	rd, err := reading.Decode(m.Payload())
	if err == nil {
		d.key, d.rd = rd.Key, rd
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		// Close is draining acks: report this one after every earlier one.
		<-p.ackerDone
		p.report(d.key, oncekv.Result{}, oncekv.ErrClosed)
		return
	}
	if err == nil {
		payload := m.Payload()
		err = p.a.Submit(p.ctx, reading.Request(p.handler, payload, rd), func(tx *oncekv.Tx) ([]byte, error) {
			return nil, reading.Store(tx, payload, rd)
		}, func(res oncekv.Result, err error) {
			d.res, d.err = res, err
			close(d.done)
		})
	}
	if err != nil { // a bad payload, or Submit did not take the request
		d.err, d.final = err, true
		close(d.done)
	}
	p.acks <- d // Close waits for mu, so acks is open
}

// Close waits until every message handed to Handle before it is acked
// or left unacked, and ends the Pipeline's goroutines. It does not close
// the DB, and must not be called from OnResult (it would wait for that
// call to return). It returns nil, also when called again.
func (p *Pipeline) Close() error {
	// Applier.Close makes a Submit waiting for room return ErrClosed, so a
	// Handle holding mu lets go of it.
	err := p.a.Close()
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.acks)
	}
	p.mu.Unlock()
	<-p.ackerDone
	return err
}

// ack acks the messages in Handle's order, each once its first attempt
// is over and, if that failed transiently, once a retry committed it.
func (p *Pipeline) ack() {
	defer close(p.ackerDone)
	for d := range p.acks {
		<-d.done
		res, err := d.res, d.err
		switch {
		case err != nil && !d.final:
			res, err = p.retry(d, err)
		case err == nil && p.budget != nil:
			p.budget.Attempt() // a first attempt, as Retrier.Do records one
		}
		p.report(d.key, res, err)
		if ackable(err) {
			d.m.Ack()
		}
	}
}

// retry retries d after its first attempt failed with first, with p's
// backoff (an in-progress key not before its holder's lease ends) until it
// commits, ctx ends or the Retry's MaxAttempts (the first attempt
// counted) are spent. An error no retry can fix (bad input, a failure the
// store recorded) or one that needs the store reopened ends it at once.
func (p *Pipeline) retry(d *delivery, first error) (oncekv.Result, error) {
	res := d.res
	payload := d.m.Payload()
	err := p.r.Do(p.ctx, func(ctx context.Context, attempt int) error {
		err := first
		if attempt > 1 {
			res, err = p.db.Apply(ctx, reading.Request(p.handler, payload, d.rd), func(tx *oncekv.Tx) ([]byte, error) {
				return nil, reading.Store(tx, payload, d.rd)
			})
		}
		switch adv := oncekv.Classify(err); adv.Action {
		case oncekv.Ack:
			return nil
		case oncekv.GiveUp, oncekv.Reopen:
			return retry.Permanent(err)
		default:
			if !adv.NotBefore.IsZero() {
				return retry.After(adv.NotBefore.Sub(p.db.Now()), err)
			}
			return err
		}
	})
	return res, err
}

// report calls OnResult, if set.
func (p *Pipeline) report(key string, res oncekv.Result, err error) {
	if p.on != nil {
		p.on(key, res, err, ackable(err))
	}
}
