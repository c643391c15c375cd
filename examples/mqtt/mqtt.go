// Package mqtt is oncekv between MQTT producers and consumers (QoS 1, at
// least once): a consumer that applies each message once however often
// the broker redelivers it, and a publisher that publishes through the
// store's transactional outbox, so a reading recorded locally is published
// at least once even when the device reboots in between.
//
// The consumer keeps a persistent session (CleanSession false, a fixed
// client ID) and acknowledges a message only after the commit that applied
// it, so a consumer killed mid-message gets it again when it reconnects,
// and the store's mark turns that redelivery into a duplicate. Its messages
// go through one oncekv.Applier (Pipeline): those the broker has in flight
// for the session share commits, one fsync for many. The idempotency key
// comes from the payload, never from MQTT's packet id: that id names a
// slot of one session's in-flight window and is reused for other messages.
package mqtt

import (
	"context"
	"errors"
	"fmt"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/examples/internal/reading"
	"github.com/oncekv/oncekv/examples/internal/required"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/retry"
)

// ErrInvalidOptions is returned by Consume, before it connects, for
// options it cannot run with, naming each missing field.
var ErrInvalidOptions = errors.New("oncekv: mqtt: invalid consumer options")

// ConsumerOptions configures Consume.
type ConsumerOptions struct {
	// Broker is the broker's URL, for example "tcp://127.0.0.1:1883".
	Broker string
	// ClientID names the persistent session: the broker keeps the
	// subscription and the unacknowledged messages under it while the
	// consumer is away. It must be the same at every restart.
	ClientID string
	// Topic is subscribed at QoS 1.
	Topic string
	// Handler is the oncekv handler of the applies. Default "mqtt-readings".
	Handler string
	// Retry paces the retries of an Apply that failed transiently (another
	// worker's claim, a full disk). nil: retry's defaults.
	Retry *retry.Policy
	// MaxInFlight caps the messages handled and not yet acked (or left
	// unacked): paho's delivery handler blocks past it. Default, and for
	// zero or less, oncekv.DefaultMaxInFlight. The broker's own limit of
	// unacked messages per session (mosquitto's max_inflight_messages, 20
	// by default) is often the smaller one.
	MaxInFlight int
	// Subscribed, if set, is called once the subscription is in place:
	// from then on the broker keeps the topic's messages for the session.
	Subscribed func()
	// OnResult, if set, is called after each message was handled, with
	// its key, Apply's result and error, and whether it was acknowledged.
	// It runs after the commit that decided the message (and its retries)
	// and before the ack, on the Pipeline's acking goroutine, one call at a
	// time, in the order the messages were delivered; a panic in it ends
	// the process, as one in a paho handler does.
	OnResult func(key string, res oncekv.Result, err error, acked bool)
}

// Consume subscribes with a persistent session and applies each message
// with reading.Store, through a Pipeline, until ctx ends. A message is
// acknowledged once the commit that applied it returned or the store
// answered it as a duplicate, or when no retry can help (a bad payload, a
// permanent failure the store recorded); one that is not acknowledged (ctx
// ended first, or the store must be reopened) comes back when the session
// reconnects. Before it disconnects, Consume waits for the messages in
// flight, so the acks of those committed go out.
func Consume(ctx context.Context, db *oncekv.DB, o ConsumerOptions) error {
	if err := required.Check(ErrInvalidOptions,
		required.Field{Name: "Broker", Value: o.Broker},
		required.Field{Name: "ClientID", Value: o.ClientID},
		required.Field{Name: "Topic", Value: o.Topic}); err != nil {
		return err
	}
	p, err := NewPipeline(ctx, db, o)
	if err != nil {
		return err
	}
	// Messages the broker kept for the session arrive right after CONNACK,
	// before Subscribe returns; the default handler takes those too. paho
	// calls it for one message at a time (SetOrderMatters's default), and
	// it returns before the commit, so the session's messages in flight
	// pipeline.
	opts := paho.NewClientOptions().AddBroker(o.Broker).SetClientID(o.ClientID).
		SetCleanSession(false).SetAutoAckDisabled(true).SetDefaultPublishHandler(p.Handle)
	c := paho.NewClient(opts)
	if err := wait(ctx, c.Connect()); err != nil {
		p.Close()
		return fmt.Errorf("oncekv: mqtt: connect to %s: %w", o.Broker, err)
	}
	// Close the Pipeline before Disconnect: its last acks go out while the
	// connection is up.
	defer c.Disconnect(250)
	defer p.Close()
	if err := wait(ctx, c.Subscribe(o.Topic, 1, nil)); err != nil {
		return fmt.Errorf("oncekv: mqtt: subscribe to %q: %w", o.Topic, err)
	}
	if o.Subscribed != nil {
		o.Subscribed()
	}
	<-ctx.Done()
	return nil
}

// ackable reports whether a message handled with err is to be
// acknowledged: yes when applied or a duplicate, and when redelivering it
// cannot help; no when the store must be reopened or ctx ended, so the
// broker delivers it again.
func ackable(err error) bool {
	switch oncekv.Classify(err).Action {
	case oncekv.Ack, oncekv.GiveUp:
		return true
	}
	return false
}

// Record applies a reading in the publisher's own store (deduplicating the
// sensor's input by its key) and, in the same transaction, enqueues it in
// the outbox q: the reading is recorded and queued for publishing, or
// neither. relay.Run with Sender publishes it later.
func Record(ctx context.Context, db *oncekv.DB, q *queue.Queue, handler string, r reading.Reading) (oncekv.Result, error) {
	body := reading.Encode(r)
	return db.Apply(ctx, reading.Request(handler, body, r), func(tx *oncekv.Tx) ([]byte, error) {
		_, err := q.EnqueueTx(tx, queue.Message{Key: r.Key, Body: body})
		return nil, err
	})
}

// Sender returns the outbox's send function, for relay.Run: it publishes the message's
// body at QoS 1 to topic and returns when the broker's PUBACK came (nil),
// the publish failed, or ctx ended. A message whose PUBACK was lost is
// published again on the next attempt: at least once, and the consumer's
// store deduplicates by the key in the body.
func Sender(c paho.Client, topic string) func(ctx context.Context, m *queue.Message) error {
	return func(ctx context.Context, m *queue.Message) error {
		if err := wait(ctx, c.Publish(topic, 1, false, m.Body)); err != nil {
			return fmt.Errorf("oncekv: mqtt: publish %q to %q: %w", m.Key, topic, err)
		}
		return nil
	}
}

// wait waits for a paho token or ctx, whichever comes first.
func wait(ctx context.Context, t paho.Token) error {
	select {
	case <-t.Done():
		return t.Error()
	case <-ctx.Done():
		return ctx.Err()
	}
}
