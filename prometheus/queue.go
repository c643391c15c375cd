package prometheus

import (
	"errors"
	"fmt"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
)

// queueMetric is a gauge or counter with a queue label, read from
// queue.Stats.
type queueMetric struct {
	desc  *prom.Desc
	kind  prom.ValueType
	value func(st *queue.Stats) float64
}

func queueGauge(name, help string, value func(st *queue.Stats) float64) queueMetric {
	return queueMetric{desc("queue_"+name, help, "queue"), prom.GaugeValue, value}
}

func queueCounter(name, help string, value func(st *queue.Stats) float64) queueMetric {
	return queueMetric{desc("queue_"+name, help, "queue"), prom.CounterValue, value}
}

// queueMetrics are the metrics of every queue added with AddQueue. The
// counters start at zero when the queue is opened in the process, as the
// store's do.
var queueMetrics = []queueMetric{
	queueGauge("depth", "Live messages: ready, delayed, in flight and waiting for their ordering key (dead letters are not).",
		func(st *queue.Stats) float64 { return float64(st.Depth) }),
	queueGauge("ready", "Messages visible now, leases that ran out included.",
		func(st *queue.Stats) float64 { return float64(st.Ready) }),
	queueGauge("in_flight", "Messages leased to a consumer whose lease still runs.",
		func(st *queue.Stats) float64 { return float64(st.InFlight) }),
	queueGauge("delayed", "Messages not visible yet: a delay, or a nack's backoff.",
		func(st *queue.Stats) float64 { return float64(st.Delayed) }),
	queueGauge("waiting", "Messages behind an earlier message of their ordering key.",
		func(st *queue.Stats) float64 { return float64(st.Waiting) }),
	queueGauge("dead", "Dead letters held, waiting for a redrive or a purge.",
		func(st *queue.Stats) float64 { return float64(st.Dead) }),
	queueGauge("bytes", "Keys and bodies held, dead letters included.",
		func(st *queue.Stats) float64 { return float64(st.Bytes) }),
	queueGauge("oldest_visible_age_seconds", "How long the oldest visible message has been visible: consumer lag. 0 when none is.",
		func(st *queue.Stats) float64 { return st.OldestVisibleAge.Seconds() }),
	queueGauge("oldest_age_seconds", "How long ago the oldest live message (waiting or in flight) was enqueued: how far behind a relay is. 0 when the queue is empty.",
		func(st *queue.Stats) float64 { return st.OldestAge.Seconds() }),
	queueCounter("enqueued_total", "Messages added.",
		func(st *queue.Stats) float64 { return float64(st.Enqueued) }),
	queueCounter("duplicates_total", "Enqueues answered by an earlier message with the same ID, which added nothing.",
		func(st *queue.Stats) float64 { return float64(st.Duplicates) }),
	queueCounter("acked_total", "Messages acknowledged.",
		func(st *queue.Stats) float64 { return float64(st.Acked) }),
	queueCounter("nacked_total", "Messages given back for a retry after a backoff.",
		func(st *queue.Stats) float64 { return float64(st.Nacked) }),
	queueCounter("expired_total", "Leases that ran out before an ack or a nack: a consumer died or stalled.",
		func(st *queue.Stats) float64 { return float64(st.Expired) }),
	queueCounter("dead_lettered_total", "Messages moved to the dead letters: too many attempts, or a permanent error.",
		func(st *queue.Stats) float64 { return float64(st.DeadLettered) }),
	queueCounter("redriven_total", "Dead letters moved back to the queue.",
		func(st *queue.Stats) float64 { return float64(st.Redriven) }),
	queueCounter("dropped_total", "Messages dropped to make room (DropOldest).",
		func(st *queue.Stats) float64 { return float64(st.Dropped) }),
}

// ErrQueueAdded: AddQueue was given a queue whose name the Collector
// reports already.
var ErrQueueAdded = errors.New("oncekv: prometheus: a queue of that name was added already")

// AddQueue adds q's Stats to what the Collector exports, labelled
// queue=q.Name(). Queues are added by the program, never from input, so
// the series grow only with the queues it names: the Collector holds at
// most one entry per AddQueue that succeeded. A name added twice is
// refused with ErrQueueAdded (its series would collide), and a nil q with
// ErrInvalidOptions.
//
// queue.Stats reads the queue's whole index, so a scrape costs time in
// proportion to the live messages of the queues added. A queue closed (or
// whose DB is closed) is left out of the scrape; a queue whose Stats fails
// otherwise makes the scrape report the error.
func (c *Collector) AddQueue(q *queue.Queue) error {
	if q == nil {
		return fmt.Errorf("%w: nil queue", ErrInvalidOptions)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, had := range c.queues {
		if had.Name() == q.Name() {
			return fmt.Errorf("%w: %q", ErrQueueAdded, q.Name())
		}
	}
	c.queues = append(c.queues, q)
	return nil
}

// collectQueues sends the metrics of every queue added.
func (c *Collector) collectQueues(ch chan<- prom.Metric) {
	c.mu.Lock()
	queues := c.queues[:len(c.queues):len(c.queues)] // AddQueue only appends
	c.mu.Unlock()
	for _, q := range queues {
		st, err := q.Stats()
		switch {
		case errors.Is(err, queue.ErrQueueClosed), errors.Is(err, oncekv.ErrClosed):
			continue
		case err != nil:
			ch <- prom.NewInvalidMetric(queueMetrics[0].desc, fmt.Errorf("queue %q: %w", q.Name(), err))
			continue
		}
		for _, m := range queueMetrics {
			ch <- prom.MustNewConstMetric(m.desc, m.kind, m.value(&st), q.Name())
		}
	}
}
