package queue

import (
	"context"
	"fmt"

	"github.com/oncekv/oncekv"
)

// DeadLetters lists up to limit dead letters with IDs above after, in ID
// order: pass the last ID of one page as after to read the next. limit
// must be positive.
func (q *Queue) DeadLetters(after uint64, limit int) ([]*Message, error) {
	if limit <= 0 {
		return nil, q.wrap("dead letters", nil, fmt.Errorf("%w: limit %d", ErrInvalidOptions, limit))
	}
	var ms []*Message
	err := q.view(func(otx *oncekv.Tx) error {
		b := otx.Bucket(q.b.dead)
		c := b.Cursor()
		for k, v := c.Seek(idKey(after + 1)); k != nil && len(ms) < limit; k, v = c.Next() {
			id, err := parseID(k)
			if err != nil {
				return err
			}
			if id <= after {
				continue // after+1 overflowed
			}
			var t tx
			r, err := t.decode(b, id, v)
			if err != nil {
				return err
			}
			ms = append(ms, r.message(id))
		}
		return nil
	})
	return ms, q.wrap("dead letters", nil, err)
}

// DeadLetter returns the dead letter id, with its key, body, attempts and
// last error, or ErrNotFound.
func (q *Queue) DeadLetter(id uint64) (*Message, error) {
	var m *Message
	err := q.view(func(otx *oncekv.Tx) error {
		var t tx
		r, err := t.get(otx.Bucket(q.b.dead), id)
		if err != nil {
			return err
		}
		if r == nil {
			return ErrNotFound
		}
		m = r.message(id)
		return nil
	})
	return m, q.wrap("dead letter", &Message{ID: id}, err)
}

// DeleteDead deletes the dead letter id for good, or returns ErrNotFound.
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
// next delivery; LastError is kept. It returns the new message's ID. The
// key is the original one, and enqueue marks are left alone, so a consumer
// that deduplicates on the key (Apply with the message's key) does not
// apply it twice if its first delivery did apply. Errors: ErrNotFound.
func (q *Queue) Redrive(ctx context.Context, id uint64) (uint64, error) {
	var newID uint64
	err := q.update(ctx, "redrive", &Message{ID: id}, func(otx *oncekv.Tx) error {
		t, r, err := q.deadRecord(otx, id)
		if err != nil {
			return err
		}
		if err := t.deleteDead(id, r); err != nil {
			return err
		}
		newID = t.counter("seq") + 1
		if err := t.setCounter("seq", newID); err != nil {
			return err
		}
		r.Attempt, r.Token, r.DeadAt, r.Due, r.VisibleAt = 0, 0, 0, t.now, 0
		q.countOnCommit(otx, &q.counters.redriven)
		return t.insert(newID, r)
	})
	return newID, err
}

// deleteDead deletes dead letter id, whose record is r.
func (t *tx) deleteDead(id uint64, r *record) error {
	if err := t.dead.Delete(idKey(id)); err != nil {
		return err
	}
	if err := t.addDead(-1); err != nil {
		return err
	}
	return t.account(-1, -r.size())
}

func (q *Queue) deadRecord(otx *oncekv.Tx, id uint64) (*tx, *record, error) {
	if err := q.checkOpen(); err != nil {
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

// view runs fn in a read transaction, once the queue is known open.
func (q *Queue) view(fn func(otx *oncekv.Tx) error) error {
	if err := q.checkOpen(); err != nil {
		return err
	}
	return q.db.View(fn)
}
