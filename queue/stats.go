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
	Waiting  uint64 // behind an earlier message of their ordering key (or a dead letter holding it)
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

// Stats returns the queue's gauges and counters. The gauges are counts
// kept in the same transactions as the queue's writes: it reads no entry
// of the index but the first, and the delays, backoffs and leases that
// have come due since a write of the queue last folded them (a handful on
// a queue being consumed, all of them on one nobody has written since).
// A queue written by a build before these counts is read whole until its
// first writable Open builds them.
func (q *Queue) Stats() (Stats, error) {
	if err := q.checkOpen(); err != nil {
		return Stats{}, q.wrap("stats", nil, err)
	}
	var s Stats
	q.counters.into(&s)
	err := q.db.View(func(otx *oncekv.Tx) error { return q.reader.gauges(otx, &s) })
	return s, q.wrap("stats", nil, err)
}

// into copies the counters into s.
func (c *counters) into(s *Stats) {
	s.Enqueued, s.Duplicates, s.Acked = c.enqueued.Load(), c.duplicates.Load(), c.acked.Load()
	s.Nacked, s.Expired, s.DeadLettered = c.nacked.Load(), c.expired.Load(), c.deadLettered.Load()
	s.Redriven, s.Dropped = c.redriven.Load(), c.dropped.Load()
}

// gauges reads the queue's gauges in otx into s.
func (v *View) gauges(otx *oncekv.Tx, s *Stats) error {
	now := otx.Now().UnixNano()
	state := otx.Bucket(v.b.state)
	s.Bytes = readCounter(state, "bytes")
	s.Dead = readCounter(state, "dead")
	s.Depth = sub0(readCounter(state, "count"), s.Dead)
	msgs := otx.Bucket(v.b.msgs)
	if k, val := msgs.Cursor().First(); k != nil {
		id, err := parseID(k)
		if err != nil {
			return err
		}
		r, err := decodeRecord(msgs, id, val)
		if err != nil {
			return err
		}
		s.OldestAge = time.Duration(max(now-r.EnqueuedAt, 0))
	}
	if k, _ := otx.Bucket(v.b.index).Cursor().First(); k != nil {
		at, _, err := parseIndexKey(k)
		if err != nil {
			return err
		}
		if at <= now {
			s.OldestVisibleAge = time.Duration(now - at)
		}
	}
	sched, lease := otx.Bucket(v.b.sched), otx.Bucket(v.b.lease)
	if sched == nil || lease == nil || readCounter(state, "layout") < layoutVersion {
		g, err := v.scanIndex(otx, now)
		s.Ready, s.InFlight, s.Delayed = g.Ready, g.InFlight, g.Delayed
		s.Waiting = sub0(s.Depth, g.Ready+g.InFlight+g.Delayed)
		return err
	}
	dueLeases, err := countDue(lease, now)
	if err != nil {
		return err
	}
	dueSched, err := countDue(sched, now)
	if err != nil {
		return err
	}
	index := readCounter(state, "index")
	leased, scheduled := readCounter(state, "leased"), readCounter(state, "sched")
	s.InFlight = sub0(leased, dueLeases)
	s.Delayed = sub0(scheduled, dueSched)
	s.Ready = sub0(index, leased+scheduled) + dueLeases + dueSched
	s.Waiting = sub0(s.Depth, index)
	return nil
}

// countDue counts the entries of a side index (.w or .l) that have come
// due at now: those at its start.
func countDue(side *oncekv.Bucket, now int64) (uint64, error) {
	var n uint64
	c := side.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		at, _, err := parseIndexKey(k)
		if err != nil {
			return n, err
		}
		if at > now {
			break
		}
		n++
	}
	return n, nil
}

// scanIndex reads the whole index: the gauges of a queue without its
// counts, and what Check compares the counts with.
func (v *View) scanIndex(otx *oncekv.Tx, now int64) (Stats, error) {
	var s Stats
	err := otx.Bucket(v.b.index).ForEach(func(k, val []byte) error {
		at, _, err := parseIndexKey(k)
		if err != nil {
			return err
		}
		leased := len(val) == 1 && val[0] == 1
		switch {
		case at <= now:
			s.Ready++
		case leased:
			s.InFlight++
		default:
			s.Delayed++
		}
		return nil
	})
	return s, err
}

// sub0 is a-b, or 0 when b is larger: counters damaged on disk (which
// Check reports) must not read as billions of messages.
func sub0(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
