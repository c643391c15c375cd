// Package edgeagent is an example of the outbox on an edge device: sensor
// readings are recorded in a local oncekv store and relayed over a flaky
// uplink to an ingest server that applies each exactly once.
//
// The agent's side: Record applies a reading under its own id (a sensor
// that reports the same reading twice records it once) and, in the same
// transaction, enqueues it in the outbox (queue.EnqueueTx); Run relays the
// outbox with relay.HTTPSender, the reading's id in Idempotency-Key. A
// reboot at any instant loses nothing: the reading and its outbox entry
// commit together, and an entry stays until the server's 2xx is acked.
//
// The server's side: Server is an ingest endpoint behind the idemhttp
// middleware, which stores each answer with the reading it wrote, so a
// retry whose first answer was lost on the way gets that answer back
// instead of a second write.
package edgeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
)

// Reading is one sensor reading. ID identifies it for good: the sensor
// mints it once, and every retry, reboot and redrive reuses it.
type Reading struct {
	ID     string  `json:"id"`
	Sensor string  `json:"sensor"`
	Value  float64 `json:"value"`
}

// recordHandler is the dedup scope of the agent's local input.
const recordHandler = "edge-agent.record"

// Options configures an Agent. Nil fields take the packages' defaults.
type Options struct {
	Store  *oncekv.Options
	Queue  *queue.Options
	Relay  *relay.Options
	Device string // sent as "Authorization: Device <name>"; default "edge-1"
}

// Agent is the device side: a store, its outbox and the relay.
type Agent struct {
	db    *oncekv.DB
	q     *queue.Queue
	relay *relay.Relay
}

// Open opens the agent's store at path and prepares a relay to url.
func Open(path, url string, o *Options) (*Agent, error) {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Device == "" {
		c.Device = "edge-1"
	}
	send, err := relay.HTTPSender(nil, http.MethodPost, url, &relay.HTTPOptions{
		Header: http.Header{"Authorization": {"Device " + c.Device}, "Content-Type": {"application/json"}},
	})
	if err != nil {
		return nil, err
	}
	db, err := oncekv.Open(path, c.Store)
	if err != nil {
		return nil, err
	}
	q, err := queue.Open(db, "uplink", c.Queue)
	if err != nil {
		return nil, errors.Join(err, db.Close())
	}
	r, err := relay.New(q, send, c.Relay)
	if err != nil {
		return nil, errors.Join(err, q.Close(), db.Close())
	}
	return &Agent{db: db, q: q, relay: r}, nil
}

// Record stores r and puts it in the outbox, in one transaction. A reading
// recorded before (same ID, same content) is a duplicate: nothing is
// enqueued again. The same ID with other content is oncekv.ErrKeyReuse;
// an ID that cannot be an HTTP header value (empty, a control character,
// spaces at its ends) is relay.ErrInvalidKey, and nothing is recorded.
func (a *Agent) Record(ctx context.Context, r Reading) (duplicate bool, err error) {
	// An id that cannot travel in the Idempotency-Key header would only
	// reach the dead letters: refuse it here, where the sensor hears it.
	if err := relay.CheckKey(r.ID); err != nil {
		return false, fmt.Errorf("edge-agent: reading id: %w", err)
	}
	body, err := json.Marshal(r)
	if err != nil {
		return false, fmt.Errorf("edge-agent: reading %q: %w", r.ID, err)
	}
	res, err := a.db.Apply(ctx, oncekv.Request{Handler: recordHandler, Key: r.ID, Payload: body},
		func(tx *oncekv.Tx) ([]byte, error) {
			_, err := a.q.EnqueueTx(tx, queue.Message{Key: r.ID, Body: body})
			return nil, err
		})
	return res.Duplicate, err
}

// Run relays the outbox until ctx is done; see relay.Relay.Run.
func (a *Agent) Run(ctx context.Context) error { return a.relay.Run(ctx) }

// Relay returns the agent's relay, for its Stats.
func (a *Agent) Relay() *relay.Relay { return a.relay }

// Queue returns the outbox, for its Stats and dead letters.
func (a *Agent) Queue() *queue.Queue { return a.q }

// Close closes the outbox and the store. Stop Run first.
func (a *Agent) Close() error { return errors.Join(a.q.Close(), a.db.Close()) }
