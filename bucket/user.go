package bucket

import (
	"bytes"
	"fmt"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

// Life tells the buckets and cursors of one transaction whether that
// transaction is still open. bbolt unmaps its pages when the database
// closes, so touching a bucket after its transaction ended could read freed
// memory; every user-facing call checks Life first and fails cleanly instead.
type Life struct{ ended atomic.Bool }

// End marks the transaction finished.
func (l *Life) End() { l.ended.Store(true) }

// Ended reports whether the transaction has finished.
func (l *Life) Ended() bool { return l.ended.Load() }

// Bucket is a user bucket: a named key/value space behind the "u/" prefix. It has
// bbolt's semantics: keys sort bytewise, a value returned by Get or a cursor
// is valid only until the transaction ends, and writes need a writable
// transaction.
type Bucket struct {
	b    *bolt.Bucket
	name []byte
	life *Life
}

// UserBucket returns the user bucket name, or nil when it does not exist.
func UserBucket(tx *bolt.Tx, name []byte, life *Life) *Bucket {
	if len(name) == 0 || len(name) > MaxBucketNameSize {
		return nil
	}
	b := tx.Bucket(userName(name))
	if b == nil {
		return nil
	}
	return &Bucket{b: b, name: bytes.Clone(name), life: life}
}

// CreateUserBucket returns the user bucket name, creating it if needed.
func CreateUserBucket(tx *bolt.Tx, name []byte, life *Life) (*Bucket, error) {
	if err := checkBucketName(name); err != nil {
		return nil, err
	}
	b, err := tx.CreateBucketIfNotExists(userName(name))
	if err != nil {
		return nil, fmt.Errorf("oncekv: create bucket %q: %w", clip(string(name)), mapBoltErr(err))
	}
	return &Bucket{b: b, name: bytes.Clone(name), life: life}, nil
}

// DeleteUserBucket deletes the user bucket name and everything in it. It
// reports whether the bucket existed.
func DeleteUserBucket(tx *bolt.Tx, name []byte) (bool, error) {
	if err := checkBucketName(name); err != nil {
		return false, err
	}
	full := userName(name)
	if tx.Bucket(full) == nil {
		return false, nil
	}
	if err := tx.DeleteBucket(full); err != nil {
		return false, fmt.Errorf("oncekv: delete bucket %q: %w", clip(string(name)), mapBoltErr(err))
	}
	return true, nil
}

// ForEachUserBucket calls fn with the name of every user bucket, in order.
func ForEachUserBucket(tx *bolt.Tx, fn func(name []byte) error) error {
	c := tx.Cursor()
	for k, v := c.Seek(UserPrefix); k != nil && bytes.HasPrefix(k, UserPrefix); k, v = c.Next() {
		if v != nil {
			continue // the root holds only buckets
		}
		if err := fn(k[len(UserPrefix):]); err != nil {
			return err
		}
	}
	return nil
}

func checkBucketName(name []byte) error {
	if len(name) == 0 {
		return ErrBucketNameRequired
	}
	if len(name) > MaxBucketNameSize {
		return fmt.Errorf("bucket name is %d bytes, over the limit of %d: %w", len(name), MaxBucketNameSize, ErrKeyTooLarge)
	}
	return nil
}

// Name returns the bucket's name.
func (b *Bucket) Name() []byte { return b.name }

// Writable reports whether the bucket's transaction can write.
func (b *Bucket) Writable() bool { return !b.life.Ended() && b.b.Writable() }

// Get returns the value of key, or nil if the key is absent or the
// transaction has ended. The value is valid only until the transaction ends;
// copy it to keep it.
func (b *Bucket) Get(key []byte) []byte {
	if b.life.Ended() || len(key) == 0 {
		return nil
	}
	return b.b.Get(key)
}

// Put sets key to value. Key and value are copied, so the caller may reuse
// them at once.
func (b *Bucket) Put(key, value []byte) error {
	if err := b.checkWrite(key); err != nil {
		return err
	}
	if len(value) > MaxValueSize {
		return fmt.Errorf("value of %d bytes in bucket %q: %w", len(value), clip(string(b.name)), ErrValueTooLarge)
	}
	if value == nil {
		value = []byte{} // bbolt stores nil as empty anyway; say so explicitly
	}
	return b.wrap("put", key, b.b.Put(bytes.Clone(key), bytes.Clone(value)))
}

// Delete removes key. Deleting an absent key is not an error.
func (b *Bucket) Delete(key []byte) error {
	if err := b.checkWrite(key); err != nil {
		return err
	}
	return b.wrap("delete", key, b.b.Delete(key))
}

// ForEach calls fn for every key/value pair in key order. An error from fn
// stops the iteration and is returned. fn must not modify the bucket.
func (b *Bucket) ForEach(fn func(key, value []byte) error) error {
	if b.life.Ended() {
		return ErrTxClosed
	}
	return b.b.ForEach(fn)
}

// Cursor returns a cursor over the bucket, valid until the transaction ends.
func (b *Bucket) Cursor() *Cursor {
	return &Cursor{c: b.b.Cursor(), life: b.life}
}

// NextSequence returns a new, strictly increasing integer for the bucket,
// persisted with the transaction: a ready-made source of ids.
func (b *Bucket) NextSequence() (uint64, error) {
	if b.life.Ended() {
		return 0, ErrTxClosed
	}
	n, err := b.b.NextSequence()
	return n, mapBoltErr(err)
}

func (b *Bucket) checkWrite(key []byte) error {
	switch {
	case b.life.Ended():
		return ErrTxClosed
	case !b.b.Writable():
		return ErrTxNotWritable
	case len(key) == 0:
		return ErrKeyRequired
	case len(key) > MaxKeySize:
		return fmt.Errorf("key of %d bytes in bucket %q: %w", len(key), clip(string(b.name)), ErrKeyTooLarge)
	}
	return nil
}

func (b *Bucket) wrap(op string, key []byte, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("oncekv: %s %q in bucket %q: %w", op, clip(string(key)), clip(string(b.name)), mapBoltErr(err))
}

// Cursor walks a user bucket in key order. Keys and values it returns are
// valid only until the transaction ends.
type Cursor struct {
	c    *bolt.Cursor
	life *Life
}

// First moves to the first key and returns it, or nil keys when empty.
func (c *Cursor) First() (key, value []byte) { return c.step(c.c.First) }

// Last moves to the last key.
func (c *Cursor) Last() (key, value []byte) { return c.step(c.c.Last) }

// Next moves to the next key; nil when past the end.
func (c *Cursor) Next() (key, value []byte) { return c.step(c.c.Next) }

// Prev moves to the previous key; nil when before the start.
func (c *Cursor) Prev() (key, value []byte) { return c.step(c.c.Prev) }

// Seek moves to key, or to the next key after it when absent.
func (c *Cursor) Seek(seek []byte) (key, value []byte) {
	return c.step(func() ([]byte, []byte) { return c.c.Seek(seek) })
}

// Delete removes the key under the cursor.
func (c *Cursor) Delete() error {
	if c.life.Ended() {
		return ErrTxClosed
	}
	return mapBoltErr(c.c.Delete())
}

func (c *Cursor) step(move func() ([]byte, []byte)) ([]byte, []byte) {
	if c.life.Ended() {
		return nil, nil
	}
	return move()
}
