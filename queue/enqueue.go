package queue

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/oncekv/oncekv"
)

// Enqueue adds m to the queue in its own transaction, unless a message
// with m.Key was enqueued within the store's dedup window: then it returns
// that message's ID and adds nothing. It is an Apply of the key, so
// concurrent producers share commits (group commit) and a duplicate is
// answered from a read transaction. See EnqueueTx for the errors.
func (q *Queue) Enqueue(ctx context.Context, m Message) (uint64, error) {
	if err := q.check(&m); err != nil {
		return 0, q.wrap("enqueue", &m, err)
	}
	req := oncekv.Request{Handler: q.handler, Key: m.Key, Payload: m.Body}
	res, err := q.db.Apply(ctx, req, func(otx *oncekv.Tx) ([]byte, error) {
		id, err := q.insertTx(otx, &m)
		return binary.BigEndian.AppendUint64(nil, id), err
	})
	if err != nil {
		return 0, q.wrap("enqueue", &m, err)
	}
	if res.Duplicate {
		q.counters.duplicates.Add(1)
	}
	id, err := parseID(res.Response)
	return id, q.wrap("enqueue", &m, err)
}

// EnqueueTx adds m to the queue inside otx, a write transaction, with m's
// dedup mark: the message exists if and only if otx commits. Inside
// Apply's effect this is the transactional outbox. The same Key within the
// dedup window returns the first message's ID and adds nothing; the same
// Key with another Body returns oncekv.ErrKeyReuse.
//
// The enqueue writes a dedup mark of its own, beside the enclosing Apply's:
// the message's dedup then holds whichever way the key is enqueued. It
// costs about 270 bytes per entry while the mark lives (see
// docs/design/outbox-marks.md, BenchmarkOutboxEntryBytes).
//
// Every check comes before the first write, so that a caller that
// commits otx after an error (keeping its own writes) finds the queue as
// it was: no message dropped for one that was then refused.
//
// Errors (nothing written): oncekv.ErrKeyRequired; oncekv.ErrKeyTooLarge
// for a key or an ordering key over the store's key limit;
// ErrBodyTooLarge (a body over MaxBodySize, or key, ordering key and body
// together over MaxBytes or a stored value's limit); ErrInvalidDuration
// for a negative Delay; ErrFull (policy Reject); oncekv.ErrKeyReuse;
// oncekv.ErrTxNotWritable; oncekv.ErrReadOnly; ErrQueueClosed; each names
// the queue and key. oncekv.ErrCorrupt (a damaged queue) may come after
// writes: return it, so that otx rolls back.
func (q *Queue) EnqueueTx(otx *oncekv.Tx, m Message) (uint64, error) {
	id, err := q.enqueueTx(otx, &m)
	return id, q.wrap("enqueue", &m, err)
}

func (q *Queue) enqueueTx(otx *oncekv.Tx, m *Message) (uint64, error) {
	if err := q.check(m); err != nil {
		return 0, err
	}
	req := oncekv.Request{Handler: q.handler, Key: m.Key, Payload: m.Body}
	if res, found, err := otx.LookupMark(req); found || err != nil {
		if err != nil {
			return 0, err
		}
		q.countOnCommit(otx, &q.counters.duplicates)
		return parseID(res.Response)
	}
	id, err := q.insertTx(otx, m)
	if err != nil {
		return 0, err
	}
	if _, err := otx.Mark(req, binary.BigEndian.AppendUint64(nil, id)); err != nil {
		return 0, err
	}
	return id, nil
}

// check refuses a message that cannot be enqueued, before any write.
func (q *Queue) check(m *Message) error {
	if err := q.checkWritable(); err != nil {
		return err
	}
	size := heldSize(m.Key, m.OrderingKey, m.Body)
	switch {
	case m.Key == "":
		return oncekv.ErrKeyRequired
	case len(q.handler)+len(m.Key) > maxMarkKey:
		return fmt.Errorf("%w: key of %d bytes, over %d", oncekv.ErrKeyTooLarge, len(m.Key), maxMarkKey-len(q.handler))
	case len(m.OrderingKey) > maxOrderingKey:
		return fmt.Errorf("%w: ordering key of %d bytes, over %d", oncekv.ErrKeyTooLarge, len(m.OrderingKey), maxOrderingKey)
	case len(m.Body) > q.opts.MaxBodySize:
		return fmt.Errorf("%w: %d bytes, over MaxBodySize %d", ErrBodyTooLarge, len(m.Body), q.opts.MaxBodySize)
	case q.opts.MaxBytes > 0 && size > q.opts.MaxBytes:
		return fmt.Errorf("%w: key, ordering key and body are %d bytes, over MaxBytes %d", ErrBodyTooLarge, size, q.opts.MaxBytes)
	case size > maxHeld:
		return fmt.Errorf("%w: key, ordering key and body are %d bytes, over the %d a stored message holds", ErrBodyTooLarge, size, maxHeld)
	case m.Delay < 0:
		return fmt.Errorf("%w: negative Delay %v", ErrInvalidDuration, m.Delay)
	}
	return nil
}

// insertTx adds m, a new message, to the queue in otx and returns its ID;
// the caller writes its dedup mark.
func (q *Queue) insertTx(otx *oncekv.Tx, m *Message) (uint64, error) {
	t, err := q.begin(otx)
	if err != nil {
		return 0, err
	}
	r := &record{Key: m.Key, Body: m.Body, Order: m.OrderingKey, EnqueuedAt: t.now, Due: later(t.now, m.Delay),
		Held: heldSize(m.Key, m.OrderingKey, m.Body)}
	if err := t.makeRoom(r.size()); err != nil {
		return 0, err
	}
	id := t.counter("seq") + 1
	if err := t.setCounter("seq", id); err != nil {
		return 0, err
	}
	if err := t.insert(id, r); err != nil {
		return 0, err
	}
	q.countOnCommit(otx, &q.counters.enqueued)
	return id, nil
}

// insert adds a new live message: into the index, or behind the messages
// of its ordering key.
func (t *tx) insert(id uint64, r *record) error {
	if r.Order != "" {
		_, waiting, err := t.head(r.Order)
		if err != nil {
			return err
		}
		if err := t.order.Put(orderKey(r.Order, id), nil); err != nil {
			return err
		}
		if waiting {
			r.VisibleAt = 0
			if err := t.account(1, r.size()); err != nil {
				return err
			}
			return t.put(t.msgs, id, r)
		}
	}
	if err := t.account(1, r.size()); err != nil {
		return err
	}
	t.otx.OnCommit(t.q.wakeAll)
	return t.setVisible(id, r, r.Due, false)
}

// makeRoom checks that size more bytes and one more message fit, and with
// DropOldest deletes the oldest messages until they do.
func (t *tx) makeRoom(size int64) error {
	o := &t.q.opts
	full := func() bool {
		return o.MaxMessages > 0 && t.counter("count")+1 > uint64(o.MaxMessages) ||
			o.MaxBytes > 0 && int64(t.counter("bytes"))+size > o.MaxBytes
	}
	for full() {
		if o.WhenFull == Reject {
			return fmt.Errorf("%w: holds %d messages and %d bytes (MaxMessages %d, MaxBytes %d)",
				ErrFull, t.counter("count"), t.counter("bytes"), o.MaxMessages, o.MaxBytes)
		}
		if err := t.dropOldest(); err != nil {
			return err
		}
		t.q.countOnCommit(t.otx, &t.q.counters.dropped)
	}
	return nil
}

// dropOldest deletes the message with the lowest ID, live or dead.
func (t *tx) dropOldest() error {
	lid, live, err := t.first(t.msgs)
	if err != nil {
		return err
	}
	did, dead, err := t.first(t.dead)
	switch {
	case err != nil:
		return err
	case dead != nil && (live == nil || did < lid):
		return t.deleteDead(did, dead)
	case live != nil:
		return t.remove(lid, live, false)
	}
	return fmt.Errorf("%w: empty, yet its counters say full", oncekv.ErrCorrupt)
}

// first returns the message of b with the lowest ID, or a nil record.
func (t *tx) first(b *oncekv.Bucket) (uint64, *record, error) {
	k, v := b.Cursor().First()
	if k == nil {
		return 0, nil, nil
	}
	id, err := parseID(k)
	if err != nil {
		return 0, nil, err
	}
	r, err := decodeRecord(b, id, v)
	return id, r, err
}
