package queue

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"github.com/oncekv/oncekv"
)

// View reads a queue of a store without opening it, for operators' tools
// (the admin handler, the oncekv command): it works on a store opened
// read-only and while the queue is open in this process with any options,
// and never writes. Its Stats has the counters of this process's open
// Queue of the same name, if there is one. It is safe for concurrent use.
type View struct {
	db   *oncekv.DB
	name string
	b    buckets
}

// NewView returns a view of the queue name in db. Errors: ErrNilDB,
// ErrInvalidName, ErrNoQueue, the store's; each names the queue.
func NewView(db *oncekv.DB, name string) (*View, error) {
	if err := checkName(name); err != nil {
		return nil, &Error{Op: "view", Queue: clip(name), Err: err}
	}
	if db == nil {
		return nil, &Error{Op: "view", Queue: name, Err: ErrNilDB}
	}
	v := &View{db: db, name: name, b: newBuckets(name)}
	if err := db.View(v.b.exist); err != nil {
		return nil, wrapErr(name, "view", nil, err)
	}
	return v, nil
}

// Names returns the names of the queues db holds, in order.
func Names(db *oncekv.DB) ([]string, error) {
	if db == nil {
		return nil, ErrNilDB
	}
	var names []string
	err := db.View(func(otx *oncekv.Tx) error {
		return otx.ForEachBucket(func(b []byte) error {
			name, ok := strings.CutPrefix(string(b), "oncekv.queue.")
			if !ok {
				return nil
			}
			if name, ok = strings.CutSuffix(name, ".m"); ok && checkName(name) == nil {
				names = append(names, name)
			}
			return nil
		})
	})
	return names, err
}

// Name returns the queue's name.
func (v *View) Name() string { return v.name }

func (v *View) wrap(op string, m *Message, err error) error { return wrapErr(v.name, op, m, err) }

// Stats returns the queue's gauges, read from the store at once (see
// Stats), with the counters of this process's open Queue of that name
// (zero when it is not open here).
func (v *View) Stats() (Stats, error) {
	var s Stats
	registry.Lock()
	q := registry.open[regKey{v.db, v.name}]
	registry.Unlock()
	if q != nil {
		q.counters.into(&s)
	}
	err := v.db.View(func(otx *oncekv.Tx) error { return v.gauges(otx, &s) })
	return s, v.wrap("stats", nil, err)
}

// Messages lists up to limit live messages with IDs above after, in ID
// (enqueue) order, VisibleAt filled in: pass the last ID of one page as
// after to read the next. limit must be positive.
func (v *View) Messages(after uint64, limit int) ([]*Message, error) {
	ms, err := v.list(v.b.msgs, after, limit)
	return ms, v.wrap("messages", nil, err)
}

// Message returns the live message id, VisibleAt filled in, or
// ErrNotFound.
func (v *View) Message(id uint64) (*Message, error) {
	m, err := v.one(v.b.msgs, id)
	return m, v.wrap("message", &Message{ID: id}, err)
}

// DeadLetters lists up to limit dead letters with IDs above after, in ID
// order: pass the last ID of one page as after to read the next. limit
// must be positive.
func (v *View) DeadLetters(after uint64, limit int) ([]*Message, error) {
	ms, err := v.list(v.b.dead, after, limit)
	return ms, v.wrap("dead letters", nil, err)
}

// DeadLetter returns the dead letter id, with its key, body, attempts and
// last error, or ErrNotFound.
func (v *View) DeadLetter(id uint64) (*Message, error) {
	m, err := v.one(v.b.dead, id)
	return m, v.wrap("dead letter", &Message{ID: id}, err)
}

func (v *View) list(bucket []byte, after uint64, limit int) ([]*Message, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: limit %d", ErrInvalidOptions, limit)
	}
	var ms []*Message
	err := v.db.View(func(otx *oncekv.Tx) error {
		b := otx.Bucket(bucket)
		c := b.Cursor()
		for k, val := c.Seek(idKey(after + 1)); k != nil && len(ms) < limit; k, val = c.Next() {
			id, err := parseID(k)
			if err != nil {
				return err
			}
			if id <= after {
				continue // after+1 overflowed
			}
			r, err := decodeRecord(b, id, val)
			if err != nil {
				return err
			}
			ms = append(ms, v.message(id, r))
		}
		return nil
	})
	return ms, err
}

func (v *View) one(bucket []byte, id uint64) (*Message, error) {
	var m *Message
	err := v.db.View(func(otx *oncekv.Tx) error {
		b := otx.Bucket(bucket)
		raw := b.Get(idKey(id))
		if raw == nil {
			return ErrNotFound
		}
		r, err := decodeRecord(b, id, raw)
		if err == nil {
			m = v.message(id, r)
		}
		return err
	})
	return m, err
}

// message is r as a listing shows it.
func (v *View) message(id uint64, r *record) *Message {
	m := r.message(id)
	m.queue = v.name
	if r.VisibleAt != 0 && r.DeadAt == 0 {
		m.VisibleAt = time.Unix(0, r.VisibleAt)
	}
	return m
}

// OrderingKey is what a queue holds of one ordering key.
type OrderingKey struct {
	Key      string
	Messages int    // live messages with the key, the head included
	Head     uint64 // the ID of the key's first message, the one in turn
	// Held: the head is a dead letter holding the key's later messages
	// back (HoldOrderingKey) until it is redriven or deleted.
	Held bool
}

// OrderingKeys lists up to limit ordering keys sorting after after (by
// length, then bytes), with their messages; pass the last Key of one page
// as after to read the next. It reads the keys' entries of the order
// index, so its cost grows with the messages listed. limit must be
// positive.
func (v *View) OrderingKeys(after string, limit int) ([]OrderingKey, error) {
	if limit <= 0 {
		return nil, v.wrap("ordering keys", nil, fmt.Errorf("%w: limit %d", ErrInvalidOptions, limit))
	}
	var keys []OrderingKey
	err := v.db.View(func(otx *oncekv.Tx) error {
		order, dead := otx.Bucket(v.b.order), otx.Bucket(v.b.dead)
		c := order.Cursor()
		start := orderKey(after, ^uint64(0)) // past after's last entry
		if after == "" {
			start = nil
		}
		for k, _ := c.Seek(start); k != nil; k, _ = c.Next() {
			key, id, err := parseOrderKey(k)
			if err != nil {
				return err
			}
			if n := len(keys); n > 0 && keys[n-1].Key == key {
				keys[n-1].Messages++
				continue
			}
			if len(keys) == limit {
				break
			}
			held := dead.Get(idKey(id)) != nil
			ok := OrderingKey{Key: key, Head: id, Held: held}
			if !held {
				ok.Messages = 1
			}
			keys = append(keys, ok)
		}
		return nil
	})
	return keys, v.wrap("ordering keys", nil, err)
}

// parseOrderKey reads an entry of the order bucket.
func parseOrderKey(k []byte) (string, uint64, error) {
	if len(k) < 2+8 {
		return "", 0, fmt.Errorf("%w: a queue order key of %d bytes", oncekv.ErrCorrupt, len(k))
	}
	n := int(k[0])<<8 | int(k[1])
	if len(k) != 2+n+8 {
		return "", 0, fmt.Errorf("%w: a queue order key of %d bytes for an ordering key of %d", oncekv.ErrCorrupt, len(k), n)
	}
	id, err := parseID(k[2+n:])
	return string(bytes.Clone(k[2 : 2+n])), id, err
}
