package queue

import (
	"time"

	"github.com/oncekv/oncekv"
)

// Stats describes a queue: gauges read from the store, and counters since
// the queue was opened in this process.
type Stats struct {
	Depth    uint64 // live messages: ready, delayed, in flight, waiting for their ordering key
	Ready    uint64 // visible now (leases that ran out included)
	InFlight uint64 // leased, lease still running
	Delayed  uint64 // not visible yet (a delay or a nack's backoff)
	Waiting  uint64 // behind an earlier message of their ordering key
	Dead     uint64 // dead letters
	Bytes    uint64 // keys and bodies held, dead letters included
	// OldestVisibleAge is how long the oldest visible message has been
	// visible; zero when none is.
	OldestVisibleAge time.Duration
	// OldestAge is how long ago the live message with the lowest ID (the
	// first enqueued of those still waiting or in flight) was enqueued:
	// how far behind a relay is. Zero when the queue is empty.
	OldestAge time.Duration

	Enqueued     uint64 // messages added
	Duplicates   uint64 // enqueues answered by an earlier message's ID
	Acked        uint64
	Nacked       uint64
	Expired      uint64 // leases that ran out before an ack or nack
	DeadLettered uint64
	Redriven     uint64
	Dropped      uint64 // by DropOldest
}

// Sub returns s minus o: the counters' deltas between two Stats, with s's
// gauges.
func (s Stats) Sub(o Stats) Stats {
	s.Enqueued -= o.Enqueued
	s.Duplicates -= o.Duplicates
	s.Acked -= o.Acked
	s.Nacked -= o.Nacked
	s.Expired -= o.Expired
	s.DeadLettered -= o.DeadLettered
	s.Redriven -= o.Redriven
	s.Dropped -= o.Dropped
	return s
}

// Stats returns the queue's gauges and counters. It reads the whole index,
// so its cost grows with the number of live messages.
func (q *Queue) Stats() (Stats, error) {
	c := &q.counters
	s := Stats{Enqueued: c.enqueued.Load(), Duplicates: c.duplicates.Load(), Acked: c.acked.Load(),
		Nacked: c.nacked.Load(), Expired: c.expired.Load(), DeadLettered: c.deadLettered.Load(),
		Redriven: c.redriven.Load(), Dropped: c.dropped.Load()}
	err := q.view(func(otx *oncekv.Tx) error {
		now := otx.Now().UnixNano()
		t := tx{state: otx.Bucket(q.b.state)}
		s.Bytes = t.counter("bytes")
		held := t.counter("count")
		s.Dead = t.counter("dead")
		s.Depth = held - s.Dead
		msgs := otx.Bucket(q.b.msgs)
		if k, v := msgs.Cursor().First(); k != nil {
			id, err := parseID(k)
			if err != nil {
				return err
			}
			r, err := t.decode(msgs, id, v)
			if err != nil {
				return err
			}
			s.OldestAge = time.Duration(max(now-r.EnqueuedAt, 0))
		}
		err := otx.Bucket(q.b.index).ForEach(func(k, v []byte) error {
			at, _, err := parseIndexKey(k)
			if err != nil {
				return err
			}
			leased := len(v) == 1 && v[0] == 1
			switch {
			case at <= now:
				if s.Ready == 0 {
					s.OldestVisibleAge = time.Duration(now - at)
				}
				s.Ready++
			case leased:
				s.InFlight++
			default:
				s.Delayed++
			}
			return nil
		})
		s.Waiting = s.Depth - s.Ready - s.InFlight - s.Delayed
		return err
	})
	return s, q.wrap("stats", nil, err)
}
