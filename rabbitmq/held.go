package rabbitmq

import (
	"container/heap"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// heldDelivery is a delivery waiting for its Requeue's delay.
type heldDelivery struct {
	d   amqp.Delivery
	key string
	due time.Time
}

// held is the consumer's deliveries waiting to be requeued, soonest
// first. It holds at most the channel's prefetch count, since RabbitMQ
// sends no more unacknowledged deliveries than that. It is used by Run's
// goroutine only.
type held []heldDelivery

func (h held) Len() int           { return len(h) }
func (h held) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h held) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *held) Push(x any)        { *h = append(*h, x.(heldDelivery)) }
func (h *held) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// add holds d until due.
func (h *held) add(d amqp.Delivery, key string, due time.Time) {
	heap.Push(h, heldDelivery{d: d, key: key, due: due})
}

// next returns when the soonest delivery is due, and false when none is
// held.
func (h held) next() (time.Time, bool) {
	if len(h) == 0 {
		return time.Time{}, false
	}
	return h[0].due, true
}

// due removes and returns the deliveries due at now.
func (h *held) due(now time.Time) []heldDelivery {
	var out []heldDelivery
	for len(*h) > 0 && !(*h)[0].due.After(now) {
		out = append(out, heap.Pop(h).(heldDelivery))
	}
	return out
}
