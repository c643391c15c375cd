package queue

import (
	"context"

	"github.com/oncekv/oncekv"
)

// DeadLetters lists up to limit dead letters with IDs above after, in ID
// order: pass the last ID of one page as after to read the next. limit
// must be positive.
func (q *Queue) DeadLetters(after uint64, limit int) ([]*Message, error) {
	if err := q.checkOpen(); err != nil {
		return nil, q.wrap("dead letters", nil, err)
	}
	return q.reader.DeadLetters(after, limit)
}

// DeadLetter returns the dead letter id, with its key, body, attempts and
// last error, or ErrNotFound.
func (q *Queue) DeadLetter(id uint64) (*Message, error) {
	if err := q.checkOpen(); err != nil {
		return nil, q.wrap("dead letter", &Message{ID: id}, err)
	}
	return q.reader.DeadLetter(id)
}

// Messages lists up to limit live messages with IDs above after, in ID
// (enqueue) order, VisibleAt filled in; see View.Messages.
func (q *Queue) Messages(after uint64, limit int) ([]*Message, error) {
	if err := q.checkOpen(); err != nil {
		return nil, q.wrap("messages", nil, err)
	}
	return q.reader.Messages(after, limit)
}

// View returns a read-only view of the queue, for its other read calls
// (Message, OrderingKeys, Check); it stays usable after Close.
func (q *Queue) View() *View { return &q.reader }

// DeleteDead deletes the dead letter id for good, or returns ErrNotFound.
// A dead letter holding its ordering key (HoldOrderingKey) lets the key's
// next message through.
func (q *Queue) DeleteDead(ctx context.Context, id uint64) error {
	return q.update(ctx, "delete dead letter", &Message{ID: id}, func(otx *oncekv.Tx) error {
		t, r, err := q.deadRecord(otx, id)
		if err != nil {
			return err
		}
		return t.deleteDead(id, r)
	})
}

// Redrive puts the dead letter id back in the queue as a new message with
// the same key and body, visible now, Attempt starting again from 1 on its
// next delivery; LastError is kept. It returns the new message's ID. A
// dead letter that holds its ordering key (HoldOrderingKey) goes back at
// the head of the key with its own ID, so the key's later messages follow
// it in their order; any other goes behind the messages of its key, if
// any. The key is the original one, and enqueue marks are left alone, so
// a consumer that deduplicates on the key (Apply with the message's key)
// does not apply it twice if its first delivery did apply.
//
// The same key means the same answer from a far side that stores answers
// by key: a message dead-lettered because an idemhttp server answered
// 4xx, and stored it, gets that 4xx replayed on its redrive (and is
// dead-lettered again). Redrive it only once the far side did not store
// the refusal (see idemhttp.DoNotStore) or its record has expired; an edit
// fixed by hand is a new message, with a new key. Errors: ErrNotFound.
func (q *Queue) Redrive(ctx context.Context, id uint64) (uint64, error) {
	var newID uint64
	err := q.update(ctx, "redrive", &Message{ID: id}, func(otx *oncekv.Tx) error {
		t, r, err := q.deadRecord(otx, id)
		if err != nil {
			return err
		}
		q.countOnCommit(otx, &q.counters.redriven)
		held, err := t.holds(id, r)
		if err != nil {
			return err
		}
		if held {
			// Back at the head of its key, with its ID, still first in .g.
			if err := t.dead.Delete(idKey(id)); err != nil {
				return err
			}
			if err := t.addDead(-1); err != nil {
				return err
			}
			r.Attempt, r.Token, r.DeadAt, r.Due, r.VisibleAt, r.LeaseUntil = 0, 0, 0, t.now, 0, 0
			newID = id
			otx.OnCommit(q.wakeAll)
			return t.setVisible(id, r, t.now, false)
		}
		if err := t.deleteDead(id, r); err != nil {
			return err
		}
		newID = t.counter("seq") + 1
		if err := t.setCounter("seq", newID); err != nil {
			return err
		}
		r.Attempt, r.Token, r.DeadAt, r.Due, r.VisibleAt, r.LeaseUntil = 0, 0, 0, t.now, 0, 0
		return t.insert(newID, r)
	})
	return newID, err
}

// deleteDead deletes dead letter id, whose record is r; one that held its
// ordering key lets the key's next message into the index.
func (t *tx) deleteDead(id uint64, r *record) error {
	held, err := t.holds(id, r)
	if err != nil {
		return err
	}
	if err := t.dead.Delete(idKey(id)); err != nil {
		return err
	}
	if err := t.addDead(-1); err != nil {
		return err
	}
	if held {
		if err := t.order.Delete(orderKey(r.Order, id)); err != nil {
			return err
		}
		if err := t.promote(r.Order); err != nil {
			return err
		}
	}
	return t.account(-1, -r.size())
}

// holds reports whether dead letter id, whose record is r, holds its
// ordering key: it is still the key's entry in .g.
func (t *tx) holds(id uint64, r *record) (bool, error) {
	if r.Order == "" {
		return false, nil
	}
	head, ok, err := t.head(r.Order)
	return ok && head == id, err
}

func (q *Queue) deadRecord(otx *oncekv.Tx, id uint64) (*tx, *record, error) {
	if err := q.checkWritable(); err != nil {
		return nil, nil, err
	}
	t, err := q.begin(otx)
	if err != nil {
		return nil, nil, err
	}
	r, err := t.get(t.dead, id)
	if err == nil && r == nil {
		err = ErrNotFound
	}
	return t, r, err
}
