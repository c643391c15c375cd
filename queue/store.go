package queue

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/bucket"
)

// The layout of a queue's buckets:
//
//	.m  msgs:  id (8, big-endian) → record
//	.v  index: visible time (8, big-endian, Unix ns) + id (8) → leased flag (1)
//	.g  order: len(ordering key) (2) + ordering key + id (8) → nothing
//	.d  dead:  id (8) → record
//	.s  state: "seq", "count", "bytes" → 8 bytes each
//
// The index holds every live message that may be delivered: ready, delayed
// and leased ones (a lease's end is when it becomes visible again). Of the
// messages sharing an ordering key, only the oldest is in the index; the
// others wait in .g until it is gone. Receive reads the index's first key,
// so its cost does not grow with the queue.
type buckets struct {
	msgs, index, order, dead, state []byte
}

func newBuckets(name string) buckets {
	p := "oncekv.queue." + name
	return buckets{msgs: []byte(p + ".m"), index: []byte(p + ".v"), order: []byte(p + ".g"),
		dead: []byte(p + ".d"), state: []byte(p + ".s")}
}

func (b *buckets) create(tx *oncekv.Tx) error {
	for _, n := range [][]byte{b.msgs, b.index, b.order, b.dead, b.state} {
		if _, err := tx.CreateBucketIfNotExists(n); err != nil {
			return err
		}
	}
	return nil
}

// recordVersion is the format version of a stored message.
const recordVersion = 1

// record is a stored message.
type record struct {
	V          uint8  `msgpack:"v"`
	Key        string `msgpack:"k"`
	Body       []byte `msgpack:"b"`
	Order      string `msgpack:"o,omitempty"`
	Attempt    int    `msgpack:"a"`
	EnqueuedAt int64  `msgpack:"e"`
	Due        int64  `msgpack:"u"` // first visible: enqueued plus delay
	VisibleAt  int64  `msgpack:"t"` // its place in the index; 0: waiting for its ordering key
	Token      uint64 `msgpack:"f"`
	LeaseUntil int64  `msgpack:"l"` // 0: not leased
	LastError  string `msgpack:"x,omitempty"`
	DeadAt     int64  `msgpack:"d,omitempty"`
	// Held is what the message counts toward MaxBytes, fixed when it is
	// enqueued: its key, ordering key and body. 0 in a record written
	// before it was kept, which counted key and body only.
	Held int64 `msgpack:"z,omitempty"`
}

// size is what r counts toward MaxBytes and Stats.Bytes: the same when
// it is added and when it is taken away, whatever build wrote it.
func (r *record) size() int64 {
	if r.Held != 0 {
		return r.Held
	}
	return int64(len(r.Key) + len(r.Body))
}

// heldSize is what a new message counts toward MaxBytes.
func heldSize(key, order string, body []byte) int64 {
	return int64(len(key) + len(order) + len(body))
}

// Limits of what a message may hold, so that every write of Enqueue is
// known to fit before the first one is made.
const (
	// maxMarkKey bounds a key and the handler of its enqueue mark
	// together: with a length prefix, they are one key of the store.
	maxMarkKey = bucket.MaxKeySize - 2
	// maxOrderingKey is the longest ordering key: its length prefix and
	// the message ID go beside it in one key of the order bucket.
	maxOrderingKey = bucket.MaxKeySize - 2 - 8
	// maxHeld bounds key, ordering key and body together, with room for
	// the record's own fields in one value of the store.
	maxHeld = bucket.MaxValueSize - 1024
)

func (r *record) message(id uint64) *Message {
	m := &Message{ID: id, Key: r.Key, Body: append([]byte(nil), r.Body...), OrderingKey: r.Order,
		Attempt: r.Attempt, EnqueuedAt: time.Unix(0, r.EnqueuedAt), Token: r.Token, LastError: r.LastError}
	if r.LeaseUntil != 0 {
		m.LeaseUntil = time.Unix(0, r.LeaseUntil)
	}
	if r.DeadAt != 0 {
		m.DeadAt = time.Unix(0, r.DeadAt)
	}
	return m
}

func idKey(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

func indexKey(at int64, id uint64) []byte {
	k := binary.BigEndian.AppendUint64(nil, uint64(at))
	return binary.BigEndian.AppendUint64(k, id)
}

// orderKey sorts the messages of one ordering key by ID; the length prefix
// keeps one key's entries from interleaving with a longer key's.
func orderKey(order string, id uint64) []byte {
	k := binary.BigEndian.AppendUint16(nil, uint16(len(order)))
	k = append(k, order...)
	return binary.BigEndian.AppendUint64(k, id)
}

// tx is one queue operation's view of a write transaction.
type tx struct {
	q                               *Queue
	otx                             *oncekv.Tx
	now                             int64
	msgs, index, order, dead, state *oncekv.Bucket
}

func (q *Queue) begin(otx *oncekv.Tx) (*tx, error) {
	t := &tx{q: q, otx: otx, now: otx.Now().UnixNano(),
		msgs: otx.Bucket(q.b.msgs), index: otx.Bucket(q.b.index), order: otx.Bucket(q.b.order),
		dead: otx.Bucket(q.b.dead), state: otx.Bucket(q.b.state)}
	if t.msgs == nil || t.index == nil || t.order == nil || t.dead == nil || t.state == nil {
		return nil, fmt.Errorf("%w: the queue's buckets are missing", oncekv.ErrCorrupt)
	}
	return t, nil
}

func (t *tx) get(b *oncekv.Bucket, id uint64) (*record, error) {
	v := b.Get(idKey(id))
	if v == nil {
		return nil, nil
	}
	return t.decode(b, id, v)
}

func (t *tx) decode(b *oncekv.Bucket, id uint64, v []byte) (*record, error) {
	var r record
	if err := msgpack.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("%w: bucket %q message %d: %v", oncekv.ErrCorrupt, b.Name(), id, err)
	}
	if r.V != recordVersion {
		return nil, fmt.Errorf("%w: bucket %q message %d: format version %d", oncekv.ErrFormatVersion, b.Name(), id, r.V)
	}
	return &r, nil
}

func (t *tx) put(b *oncekv.Bucket, id uint64, r *record) error {
	r.V = recordVersion
	v, err := msgpack.Marshal(r)
	if err != nil {
		return err
	}
	return b.Put(idKey(id), v)
}

func (t *tx) counter(name string) uint64 {
	v := t.state.Get([]byte(name))
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

func (t *tx) setCounter(name string, n uint64) error {
	return t.state.Put([]byte(name), binary.BigEndian.AppendUint64(nil, n))
}

// account adds dn messages and db bytes to what the queue holds.
func (t *tx) account(dn, db int64) error {
	if err := t.setCounter("count", uint64(int64(t.counter("count"))+dn)); err != nil {
		return err
	}
	return t.setCounter("bytes", uint64(int64(t.counter("bytes"))+db))
}

// addDead moves the count of dead letters by d; they are counted in
// "count" too.
func (t *tx) addDead(d int64) error {
	return t.setCounter("dead", uint64(int64(t.counter("dead"))+d))
}

// setVisible places live message id in the index at time at (leased: the
// end of a lease), moving it from where r says it was.
func (t *tx) setVisible(id uint64, r *record, at int64, leased bool) error {
	if r.VisibleAt != 0 {
		if err := t.index.Delete(indexKey(r.VisibleAt, id)); err != nil {
			return err
		}
	}
	r.VisibleAt = at
	flag := []byte{0}
	if leased {
		flag[0] = 1
	}
	if err := t.index.Put(indexKey(at, id), flag); err != nil {
		return err
	}
	return t.put(t.msgs, id, r)
}

// remove deletes live message id, and lets the next message of its
// ordering key into the index.
func (t *tx) remove(id uint64, r *record) error {
	if err := t.msgs.Delete(idKey(id)); err != nil {
		return err
	}
	if r.VisibleAt != 0 {
		if err := t.index.Delete(indexKey(r.VisibleAt, id)); err != nil {
			return err
		}
	}
	if r.Order != "" {
		if err := t.order.Delete(orderKey(r.Order, id)); err != nil {
			return err
		}
		if r.VisibleAt != 0 { // it was the head: the next one's turn
			if err := t.promote(r.Order); err != nil {
				return err
			}
		}
	}
	return t.account(-1, -r.size())
}

// promote puts the oldest waiting message of ordering key order into the
// index, at its own visible time (enqueue time plus delay).
func (t *tx) promote(order string) error {
	prefix := orderKey(order, 0)[:2+len(order)]
	k, _ := t.order.Cursor().Seek(prefix)
	if k == nil || len(k) != len(prefix)+8 || string(k[:len(prefix)]) != string(prefix) {
		return nil
	}
	id, err := parseID(k[len(prefix):])
	if err != nil {
		return err
	}
	r, err := t.get(t.msgs, id)
	if err != nil || r == nil {
		return err
	}
	t.otx.OnCommit(t.q.wakeAll)
	return t.setVisible(id, r, r.Due, false)
}

// parseID reads a message ID stored by this package.
func parseID(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: a queue message id of %d bytes", oncekv.ErrCorrupt, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}

// parseIndexKey reads an index key: visible time and ID.
func parseIndexKey(k []byte) (int64, uint64, error) {
	if len(k) != 16 {
		return 0, 0, fmt.Errorf("%w: a queue index key of %d bytes", oncekv.ErrCorrupt, len(k))
	}
	return int64(binary.BigEndian.Uint64(k)), binary.BigEndian.Uint64(k[8:]), nil
}

func (q *Queue) countOnCommit(otx *oncekv.Tx, c *atomic.Uint64) {
	otx.OnCommit(func() { c.Add(1) })
}

// later returns d after now, both in nanoseconds, saturated at the
// largest time: a huge Delay, Visibility, Extend or Defer (a user's
// "forever") must not wrap around into the past and make a message
// visible at once.
func later(now int64, d time.Duration) int64 {
	if d > 0 && now > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return now + int64(d)
}
