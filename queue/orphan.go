package queue

import (
	"bytes"
	"fmt"
)

// Leases orphaned by a crash.
//
// One process writes the store, so a message found leased when a queue is
// first opened in a process was leased by a process that is gone (or by a
// Queue of this process that was closed, whose calls all fail now): nobody
// will ack, nack or extend it. Waiting for its lease to run out would only
// freeze it for a visibility timeout. Lease tokens come from one counter
// per queue, and the first Open takes a token of its own, the line: every
// lease with a smaller token is an orphan, and every lease taken after
// the Open has a greater one.
//
// A released message is visible at once, as a lease that ran out: its
// next delivery counts the interrupted one as an attempt, so a message
// that kills its consumer every time is dead-lettered after MaxAttempts
// instead of looping. Leases live in .l, so the release costs a look at
// the leases, not at the queue.

// releaseLeases makes every lease with a token below line run out now.
func (t *tx) releaseLeases(line uint64) error {
	var keys [][]byte
	c := t.lease.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		at, id, err := parseIndexKey(k)
		if err != nil {
			return err
		}
		r, err := t.get(t.msgs, id)
		if err != nil {
			return err
		}
		if r == nil || r.Token >= line || r.LeaseUntil == 0 || at <= t.now {
			continue // not a lease of an earlier process, or one that ran out already
		}
		r.LastError = fmt.Sprintf("attempt %d was interrupted: the process holding its lease ended", r.Attempt)
		r.Interrupted = true
		r.LeaseUntil = t.now
		if err := t.setVisible(id, r, t.now, true); err != nil {
			return err
		}
	}
	return nil
}
