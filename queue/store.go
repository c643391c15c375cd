package queue

import (
	"bytes"
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
//	.w  sched: an index key → nothing: the entries of .v that were not yet
//	           visible when written (a delay, a backoff)
//	.l  lease: an index key → nothing: the entries of .v that are leases
//	.g  order: len(ordering key) (2) + ordering key + id (8) → nothing
//	.d  dead:  id (8) → record
//	.s  state: "seq", "count", "bytes", "dead", "index", "sched",
//	           "leased", "layout" → 8 bytes each
//
// The index holds every live message that may be delivered: ready, delayed
// and leased ones (a lease's end is when it becomes visible again). Of the
// messages sharing an ordering key, only the oldest is in the index; the
// others wait in .g until it is gone. Receive reads the index's first key,
// so its cost does not grow with the queue.
//
// Stats reads counters kept in the same transactions as the writes, and
// tells ready from delayed and in flight by walking .w and .l from their
// start while their entries have come due: an entry of .v in neither is
// ready for good (the store's clock never goes back). Writes fold due
// entries out of .w and .l (foldDue), so the walk stays short on a queue
// being consumed. A file written before these buckets existed has no
// "layout" counter: a writable Open builds them with one scan of .v.
type buckets struct {
	msgs, index, sched, lease, order, dead, state []byte
}

func newBuckets(name string) buckets {
	p := "oncekv.queue." + name
	return buckets{msgs: []byte(p + ".m"), index: []byte(p + ".v"), sched: []byte(p + ".w"), lease: []byte(p + ".l"),
		order: []byte(p + ".g"), dead: []byte(p + ".d"), state: []byte(p + ".s")}
}

// all lists the buckets every queue has had since its first version.
func (b *buckets) all() [][]byte { return [][]byte{b.msgs, b.index, b.order, b.dead, b.state} }

func (b *buckets) create(tx *oncekv.Tx) error {
	for _, n := range append(b.all(), b.sched, b.lease) {
		if _, err := tx.CreateBucketIfNotExists(n); err != nil {
			return err
		}
	}
	return nil
}

// exist checks, in a read transaction, that the queue's buckets are there
// (ErrNoQueue if not). .w and .l may be missing in a file written before
// them, which Stats then reads the slow way.
func (b *buckets) exist(otx *oncekv.Tx) error {
	for _, n := range b.all() {
		if otx.Bucket(n) == nil {
			return ErrNoQueue
		}
	}
	return nil
}

// rebuildSides fills .w, .l and the counters of the index from one scan
// of .v, for a file written before they existed (or whose "layout" is
// missing), and sets "layout".
func (t *tx) rebuildSides() error {
	for _, side := range []*oncekv.Bucket{t.sched, t.lease} {
		var keys [][]byte
		if err := side.ForEach(func(k, _ []byte) error { keys = append(keys, bytes.Clone(k)); return nil }); err != nil {
			return err
		}
		for _, k := range keys {
			if err := side.Delete(k); err != nil {
				return err
			}
		}
	}
	var n, sched, leased uint64
	err := t.index.ForEach(func(k, v []byte) error {
		at, _, err := parseIndexKey(k)
		if err != nil {
			return err
		}
		n++
		switch {
		case len(v) == 1 && v[0] == 1:
			leased++
			return t.lease.Put(k, nil)
		case at > t.now:
			sched++
			return t.sched.Put(k, nil)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for name, v := range map[string]uint64{"index": n, "sched": sched, "leased": leased, "layout": layoutVersion} {
		if err := t.setCounter(name, v); err != nil {
			return err
		}
	}
	return nil
}

// layoutVersion is the "layout" counter of a queue whose .w and .l and
// the counters of its index are maintained.
const layoutVersion = 2

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
	// Interrupted: the lease was released at an Open, its process gone;
	// LastError says so, and the next delivery keeps it.
	Interrupted bool `msgpack:"i,omitempty"`
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
	q                                             *Queue
	otx                                           *oncekv.Tx
	now                                           int64
	msgs, index, sched, lease, order, dead, state *oncekv.Bucket
}

func (q *Queue) begin(otx *oncekv.Tx) (*tx, error) {
	t := &tx{q: q, otx: otx, now: otx.Now().UnixNano(),
		msgs: otx.Bucket(q.b.msgs), index: otx.Bucket(q.b.index), sched: otx.Bucket(q.b.sched),
		lease: otx.Bucket(q.b.lease), order: otx.Bucket(q.b.order),
		dead: otx.Bucket(q.b.dead), state: otx.Bucket(q.b.state)}
	if t.msgs == nil || t.index == nil || t.order == nil || t.dead == nil || t.state == nil ||
		t.sched == nil || t.lease == nil {
		return nil, fmt.Errorf("%w: the queue's buckets are missing", oncekv.ErrCorrupt)
	}
	return t, nil
}

func (t *tx) get(b *oncekv.Bucket, id uint64) (*record, error) {
	v := b.Get(idKey(id))
	if v == nil {
		return nil, nil
	}
	return decodeRecord(b, id, v)
}

func decodeRecord(b *oncekv.Bucket, id uint64, v []byte) (*record, error) {
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

func (t *tx) counter(name string) uint64 { return readCounter(t.state, name) }

// readCounter reads a counter of the state bucket; an absent one (or one
// that is not 8 bytes, which Check reports) reads as 0.
func readCounter(state *oncekv.Bucket, name string) uint64 {
	v := state.Get([]byte(name))
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

func (t *tx) setCounter(name string, n uint64) error {
	return t.state.Put([]byte(name), binary.BigEndian.AppendUint64(nil, n))
}

// add moves counter name by d.
func (t *tx) add(name string, d int64) error {
	return t.setCounter(name, uint64(int64(t.counter(name))+d))
}

// account adds dn messages and db bytes to what the queue holds.
func (t *tx) account(dn, db int64) error {
	if err := t.add("count", dn); err != nil {
		return err
	}
	t.otx.OnCommit(t.q.notify)
	return t.add("bytes", db)
}

// addDead moves the count of dead letters by d; they are counted in
// "count" too.
func (t *tx) addDead(d int64) error { return t.add("dead", d) }

// setVisible places live message id in the index at time at (leased: the
// end of a lease), moving it from where r says it was.
func (t *tx) setVisible(id uint64, r *record, at int64, leased bool) error {
	if r.VisibleAt != 0 {
		if err := t.unindex(r.VisibleAt, id); err != nil {
			return err
		}
	}
	r.VisibleAt = at
	k := indexKey(at, id)
	flag := []byte{0}
	if leased {
		flag[0] = 1
	}
	if err := t.index.Put(k, flag); err != nil {
		return err
	}
	if err := t.add("index", 1); err != nil {
		return err
	}
	switch {
	case leased:
		err := t.lease.Put(k, nil)
		if err == nil {
			err = t.add("leased", 1)
		}
		if err != nil {
			return err
		}
	case at > t.now:
		err := t.sched.Put(k, nil)
		if err == nil {
			err = t.add("sched", 1)
		}
		if err != nil {
			return err
		}
	}
	t.otx.OnCommit(t.q.notify)
	return t.put(t.msgs, id, r)
}

// unindex deletes the index entry at (at, id), and its entry in .w or .l.
func (t *tx) unindex(at int64, id uint64) error {
	k := indexKey(at, id)
	if err := t.index.Delete(k); err != nil {
		return err
	}
	if err := t.add("index", -1); err != nil {
		return err
	}
	return t.unside(k)
}

// unside deletes index key k from .l or .w, wherever it is.
func (t *tx) unside(k []byte) error {
	for _, side := range []struct {
		b       *oncekv.Bucket
		counter string
	}{{t.lease, "leased"}, {t.sched, "sched"}} {
		if side.b.Get(k) == nil {
			continue
		}
		if err := side.b.Delete(k); err != nil {
			return err
		}
		return t.add(side.counter, -1)
	}
	return nil
}

// foldMax bounds the due entries one write folds out of .w and .l.
const foldMax = 64

// foldDue takes up to foldMax entries that have come due out of .w and
// .l: their messages are ready for good, which Stats then reads from the
// counters alone.
func (t *tx) foldDue() error {
	for _, side := range []struct {
		b       *oncekv.Bucket
		counter string
	}{{t.lease, "leased"}, {t.sched, "sched"}} {
		var due [][]byte
		c := side.b.Cursor()
		for k, _ := c.First(); k != nil && len(due) < foldMax; k, _ = c.Next() {
			at, _, err := parseIndexKey(k)
			if err != nil {
				return err
			}
			if at > t.now {
				break
			}
			due = append(due, bytes.Clone(k))
		}
		for _, k := range due {
			if err := side.b.Delete(k); err != nil {
				return err
			}
		}
		if err := t.add(side.counter, -int64(len(due))); err != nil {
			return err
		}
	}
	return nil
}

// remove deletes live message id, and lets the next message of its
// ordering key into the index, unless hold: then its entry in .g stays,
// and holds the key's later messages back (a dead-lettered head, see
// HoldOrderingKey).
func (t *tx) remove(id uint64, r *record, hold bool) error {
	if err := t.msgs.Delete(idKey(id)); err != nil {
		return err
	}
	if r.VisibleAt != 0 {
		if err := t.unindex(r.VisibleAt, id); err != nil {
			return err
		}
	}
	if r.Order != "" && !hold {
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
// index, at its own visible time (enqueue time plus delay), unless the
// oldest is a dead letter holding the key.
func (t *tx) promote(order string) error {
	id, ok, err := t.head(order)
	if err != nil || !ok {
		return err
	}
	r, err := t.get(t.msgs, id)
	if err != nil || r == nil {
		return err // nil: a held dead letter
	}
	t.otx.OnCommit(t.q.wakeAll)
	return t.setVisible(id, r, r.Due, false)
}

// head returns the ID of the oldest message of ordering key order in .g,
// live or a held dead letter.
func (t *tx) head(order string) (uint64, bool, error) {
	return orderHead(t.order, order)
}

// orderHead returns the ID of the first entry of ordering key order in
// the order bucket b.
func orderHead(b *oncekv.Bucket, order string) (uint64, bool, error) {
	prefix := orderKey(order, 0)[:2+len(order)]
	k, _ := b.Cursor().Seek(prefix)
	if k == nil || len(k) != len(prefix)+8 || !bytes.HasPrefix(k, prefix) {
		return 0, false, nil
	}
	id, err := parseID(k[len(prefix):])
	return id, err == nil, err
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
