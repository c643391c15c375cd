package bucket

import (
	"bytes"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/fencestore"
)

// Cursor walks a user bucket in key order. Keys and values it returns are
// valid only until the transaction ends.
type Cursor struct {
	c    *bolt.Cursor
	b    *Bucket
	life *base.Life
	key  []byte // the key under the cursor, as the last move returned it
	// parked is set after a Delete in a headered bucket left the cursor
	// on the next entry, which the caller has not seen: Next returns it
	// instead of moving past it. next is that entry, nil past the end.
	parked    bool
	next, val []byte
}

// First moves to the first key and returns it, or nil keys when empty.
func (c *Cursor) First() (key, value []byte) { return c.step(c.c.First, c.c.Next) }

// Last moves to the last key.
func (c *Cursor) Last() (key, value []byte) { return c.step(c.c.Last, c.c.Prev) }

// Next moves to the next key; nil when past the end.
func (c *Cursor) Next() (key, value []byte) {
	if c.parked {
		return c.step(func() ([]byte, []byte) { return c.next, c.val }, c.c.Next)
	}
	return c.step(c.c.Next, c.c.Next)
}

// Prev moves to the previous key; nil when before the start.
func (c *Cursor) Prev() (key, value []byte) { return c.step(c.c.Prev, c.c.Prev) }

// Seek moves to key, or to the next key after it when absent.
func (c *Cursor) Seek(seek []byte) (key, value []byte) {
	return c.step(func() ([]byte, []byte) { return c.c.Seek(seek) }, c.c.Next)
}

// Delete removes the key under the cursor: the one the last move returned.
// With no key under it (before the first move, past the end, or right
// after a Delete) it does nothing. Like Bucket.Delete, it keeps the key's
// fence and moves its version on. In a bucket with fence headers (see
// Bucket) the next Next returns the key after the deleted one, so a loop that deletes
// as it moves forwards visits every key; buckets created before keep
// bbolt's cursor, which may skip that key.
func (c *Cursor) Delete() error {
	switch {
	case c.life.Ended():
		return ErrTxClosed
	case !c.b.b.Writable():
		return ErrTxNotWritable
	case c.key == nil:
		return nil
	}
	if c.b.headered() {
		return c.deleteHeadered()
	}
	if err := c.b.touch("delete", c.key); err != nil {
		return err
	}
	c.key = nil // bbolt now points at the next key, which the caller has not seen
	return base.MapBoltErr(c.c.Delete())
}

// deleteHeadered is Delete in a headered bucket. It deletes through the
// bucket, as a key that keeps its fence is rewritten as a tombstone, not
// deleted, and then puts the cursor back: on the tombstone, which the next
// move skips, or parked on the entry after the deleted key. So a loop
// that deletes as it moves forwards visits every key.
func (c *Cursor) deleteHeadered() error {
	key := c.key
	c.key = nil
	err := c.b.deleteHeadered(key)
	if k, v := c.c.Seek(key); !bytes.Equal(k, key) {
		c.parked, c.next, c.val = true, k, v
	}
	return err
}

// step makes move, then, in a headered bucket, goes on with then past the
// entries that hold no value: the tombstones of deleted keys that keep
// their fence, and entries whose header is damaged. It returns values
// without their header.
func (c *Cursor) step(move, then func() ([]byte, []byte)) ([]byte, []byte) {
	if c.life.Ended() {
		return nil, nil
	}
	c.parked = false
	k, v := move()
	if c.b.headered() {
		for ; k != nil; k, v = then() {
			if e, err := fencestore.ParseEntry(v); err == nil && e.Exists() {
				v = e.Value
				break
			}
		}
	}
	c.key = k
	return k, v
}
