package rabbitmq

import (
	amqp "github.com/rabbitmq/amqp091-go"
)

// maxTracked bounds the keys whose failed attempts a consumer counts in
// memory; past it, the oldest count is dropped, and its key starts again
// at attempt 1.
const maxTracked = 10000

// attempts numbers the deliveries of each key. RabbitMQ counts deliveries
// only in quorum queues (the x-delivery-count header); for the others the
// consumer counts, in memory, the deliveries of the keys that failed, so a
// transient failure's backoff grows and its retries end. That count starts
// again when the consumer restarts. It is used by Run's goroutine only.
type attempts struct {
	max   int
	count map[string]int // bounded by max
	order []string       // keys in the order first counted, for eviction
}

func newAttempts(max int) *attempts {
	return &attempts{max: max, count: make(map[string]int)}
}

// next returns the number of this delivery of key: 1 + x-delivery-count
// when the broker counted, else one more than the deliveries counted here.
func (a *attempts) next(key string, d *amqp.Delivery) int {
	if n, ok := deliveryCount(d); ok {
		return n + 1
	}
	if _, ok := a.count[key]; !ok {
		for len(a.order) >= a.max {
			delete(a.count, a.order[0])
			a.order = a.order[1:]
		}
		a.order = append(a.order, key)
	}
	a.count[key]++
	return a.count[key]
}

// forget drops key's count, once its delivery was acked or dead-lettered.
// Its place in order is reclaimed when it reaches the front.
func (a *attempts) forget(key string) { delete(a.count, key) }

// deliveryCount reads the x-delivery-count header of a quorum queue.
func deliveryCount(d *amqp.Delivery) (int, bool) {
	switch n := d.Headers["x-delivery-count"].(type) {
	case int64:
		return int(min(max(n, 0), 1<<30)), true
	case int32:
		return int(max(n, 0)), true
	case int:
		return min(max(n, 0), 1<<30), true
	}
	return 0, false
}
