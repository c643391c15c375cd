package queue

import "time"

// Message is one message of a queue. Enqueue reads Key, Body, OrderingKey
// and Delay; Receive fills in the rest.
type Message struct {
	// ID is the queue's number for the message, increasing in enqueue
	// order. A redriven dead letter gets a new one, but for the dead head
	// of an ordering key (HoldOrderingKey), which keeps its own so that it
	// stays first of its key.
	ID uint64
	// Key is the idempotency key: required, stable across every delivery,
	// takeover and redrive. Hand it to the far side, or Apply with it, to
	// deduplicate.
	Key string
	// Body is the payload; the same key with another body is
	// oncekv.ErrKeyReuse.
	Body []byte
	// OrderingKey, if set, delivers the messages that share it one at a
	// time, in enqueue order (SQS FIFO's message group). It counts toward
	// Options.MaxBytes with the key and body, and is at most 32758 bytes.
	OrderingKey string
	// Delay keeps a new message invisible that long after it is enqueued.
	Delay time.Duration

	// Attempt is the delivery's number: 1 on the first.
	Attempt int
	// EnqueuedAt is when it was first enqueued (by the store's clock).
	EnqueuedAt time.Time
	// Token is the fencing token of this delivery's lease: greater than
	// every earlier delivery's of the queue. Hand it to the far side with
	// the key, to fence a late zombie; never use it as the key.
	Token uint64
	// LeaseUntil is when the lease ends and the message becomes visible
	// again, unless acked, nacked or extended first.
	LeaseUntil time.Time
	// LastError is the message of the cause of the last nack (or of the
	// lease that ran out), empty before the first.
	LastError string
	// DeadAt is when it was dead-lettered; zero for a live message.
	DeadAt time.Time
	// VisibleAt is the message's place in line, as a listing (Messages,
	// Message) reads it: when it is (or was) visible to Receive, the end
	// of its lease while leased; zero while it waits behind an earlier
	// message of its ordering key, and in a dead letter. Receive leaves
	// it zero (see LeaseUntil).
	VisibleAt time.Time

	// queue names the queue that delivered it: another queue of the store
	// may hold a message with the same ID, key and token. Empty in a
	// Message the caller built, which is then judged by those alone.
	queue string
}
