package bucket

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/fence"
	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/fences"
)

// The root package builds user buckets through these; see base.Buckets.
func init() {
	base.Buckets.Open = func(tx *bolt.Tx, name []byte, life *base.Life) any {
		if b := open(tx, name, life); b != nil {
			return b
		}
		return (*Bucket)(nil)
	}
	base.Buckets.Create = func(tx *bolt.Tx, name []byte, life *base.Life) (any, error) {
		return create(tx, name, life)
	}
	base.Buckets.Delete = drop
}

// Bucket is a user bucket: a named key/value space, apart from oncekv's
// own. It has bbolt's semantics: keys sort bytewise, a value returned by
// Get or a cursor is valid only until the transaction ends, and writes need
// a writable transaction.
//
// On top of them, a key may carry a fence and a version (see PutFenced and
// PutIfVersion), kept in the system bucket of fences where no user call
// can reach them.
type Bucket struct {
	b    *bolt.Bucket
	name []byte
	life *base.Life
	keys *fences.Keys // the fences and versions of the keys; opened on first use
	last []byte       // the key of this value's latest write, while they all appended (see packAppends)
}

// open returns the user bucket name, or nil when it does not exist.
func open(tx *bolt.Tx, name []byte, life *base.Life) *Bucket {
	if len(name) == 0 || len(name) > MaxBucketNameSize {
		return nil
	}
	b := tx.Bucket(base.UserName(name))
	if b == nil {
		return nil
	}
	return &Bucket{b: b, name: bytes.Clone(name), life: life}
}

// create returns the user bucket name, creating it if needed.
func create(tx *bolt.Tx, name []byte, life *base.Life) (*Bucket, error) {
	if err := checkBucketName(name); err != nil {
		return nil, err
	}
	b, err := tx.CreateBucketIfNotExists(base.UserName(name))
	if err != nil {
		return nil, fmt.Errorf("oncekv: create bucket %q: %w", base.Clip(string(name)), base.MapBoltErr(err))
	}
	return &Bucket{b: b, name: bytes.Clone(name), life: life}, nil
}

// drop deletes the user bucket name and everything in it. It reports
// whether the bucket existed.
func drop(tx *bolt.Tx, name []byte) (bool, error) {
	if err := checkBucketName(name); err != nil {
		return false, err
	}
	full := base.UserName(name)
	if tx.Bucket(full) == nil {
		return false, nil
	}
	if err := tx.DeleteBucket(full); err != nil {
		return false, fmt.Errorf("oncekv: delete bucket %q: %w", base.Clip(string(name)), base.MapBoltErr(err))
	}
	return true, nil
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
//
// Put carries no fence and checks no version, but it is never an invisible
// write: on a key that has a version (see PutIfVersion) it moves the
// version on, so a compare-and-set that read the key before this Put fails
// instead of overwriting it. The key's fence stays as it was.
func (b *Bucket) Put(key, value []byte) error {
	if err := b.checkPut(key, value); err != nil {
		return err
	}
	if err := b.touch("put", key); err != nil {
		return err
	}
	return b.putValue("put", key, value)
}

// Delete removes key. Deleting an absent key is not an error.
//
// A key with a fence keeps it when deleted, and its version moves on: a
// stale PutFenced cannot bring the key back, and a compare-and-set that
// read the key before it was deleted fails.
func (b *Bucket) Delete(key []byte) error {
	if err := b.checkWrite(key); err != nil {
		return err
	}
	if err := b.touch("delete", key); err != nil {
		return err
	}
	return b.wrap("delete", key, b.b.Delete(key))
}

// PutFenced sets key to value only if fence is strictly greater than the
// fence stored with the key (0 when it has none), and then stores fence with
// it. Otherwise it returns an error matching ErrFenced, a *fence.Error
// (oncekv.FenceError) holding both fences, and changes nothing: the writer
// is stale (a GC pause, a partition, a zombie worker) and must give up, not
// retry.
//
// Fences are what DB.NextFence and claim tokens issue, or any number that
// only grows, such as a Kafka offset or a Raft term. Fence 0 is
// ErrInvalidFence. Each PutFenced also moves the key's version on, like
// every other write.
func (b *Bucket) PutFenced(key, value []byte, fence uint64) error {
	return b.putAdmitted("put fenced", key, value, func(k *fences.Keys) error { return k.Fenced(key, fence) })
}

// Fence returns the fence stored with key, or 0 when it has none. Deleting a
// key keeps its fence.
//
// A fence record that does not decode reads as 0 here; every write of the
// key reports it as ErrCorrupt, so a damaged record cannot let a stale
// write through.
func (b *Bucket) Fence(key []byte) uint64 { return b.record(key).Fence }

// Version returns key's version, for a later PutIfVersion: the number of
// writes of the key since its first fenced or versioned write, counting
// plain Puts and Deletes since then. It is 0 when the key has no version:
// it is absent, or only plain Put ever wrote it. Like Fence, it reads a
// damaged record as 0.
func (b *Bucket) Version(key []byte) uint64 { return b.record(key).Version }

// PutIfVersion sets key to value only if key's version is still version,
// as read with Version, and moves the version on by one: compare-and-set
// for read-modify-write without holding a write transaction across the
// computation. When the key was written since (by any method), it returns
// an error matching ErrVersionConflict, a *fence.VersionError
// (oncekv.VersionError), and changes nothing; read again and retry.
//
// Version 0 creates: it succeeds only while the key does not exist. A key
// that exists but was written only with plain Put has version 0 too, and
// is refused with ErrUnversioned, because Put leaves no version on such a
// key and a Put racing with this call could not be detected. Bring such a
// key under versions in one transaction that deletes it and puts it again
// with version 0 (or writes it with PutFenced).
func (b *Bucket) PutIfVersion(key, value []byte, version uint64) error {
	return b.putAdmitted("put if version", key, value, func(k *fences.Keys) error {
		return k.IfVersion(key, version, b.b.Get(key) != nil)
	})
}

// putAdmitted writes value to key if admit, which checks and records the
// key's fence or version, lets it. Every input is checked before admit
// writes its record, so an error changes nothing.
func (b *Bucket) putAdmitted(op string, key, value []byte, admit func(*fences.Keys) error) error {
	if err := b.checkPut(key, value); err != nil {
		return err
	}
	keys, err := b.fences()
	if err != nil {
		return err
	}
	if err := admit(keys); err != nil {
		if errors.Is(err, fence.ErrFenced) || errors.Is(err, fence.ErrVersionConflict) || errors.Is(err, fence.ErrUnversioned) {
			b.life.Reject()
		}
		return b.wrap(op, key, err)
	}
	return b.putValue(op, key, value)
}

// touch moves key's version on for a write that carries no fence or
// version, if the key has a version.
func (b *Bucket) touch(op string, key []byte) error {
	keys, err := b.fences()
	if err != nil {
		return err
	}
	return b.wrap(op, key, keys.Touch(key))
}

// fences returns the fence records of the bucket's keys.
func (b *Bucket) fences() (*fences.Keys, error) {
	if b.keys != nil {
		return b.keys, nil
	}
	root := b.b.Tx().Bucket(fences.Root)
	if root == nil {
		return nil, fmt.Errorf("%w: system bucket %q is missing", ErrCorrupt, fences.Root)
	}
	b.keys = b.life.Keys(root, b.name)
	return b.keys, nil
}

// record returns key's fence record, zero when it has none or it cannot be
// read.
func (b *Bucket) record(key []byte) fences.Record {
	if b.life.Ended() || len(key) == 0 {
		return fences.Record{}
	}
	keys, err := b.fences()
	if err != nil {
		return fences.Record{}
	}
	r, _, _ := keys.Get(key) // zero on a decode error, which writes report
	return r
}

func (b *Bucket) checkPut(key, value []byte) error {
	if err := b.checkWrite(key); err != nil {
		return err
	}
	if len(value) > MaxValueSize {
		return fmt.Errorf("value of %d bytes in bucket %q: %w", len(value), base.Clip(string(b.name)), ErrValueTooLarge)
	}
	return nil
}

func (b *Bucket) putValue(op string, key, value []byte) error {
	if value == nil {
		value = []byte{} // bbolt stores nil as empty anyway; say so explicitly
	}
	b.packAppends(key)
	// bbolt copies the key itself, but keeps the value until the commit.
	return b.wrap(op, key, b.b.Put(key, bytes.Clone(value)))
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
	return &Cursor{c: b.b.Cursor(), b: b, life: b.life}
}

// NextSequence returns a new, strictly increasing integer for the bucket,
// persisted with the transaction: a ready-made source of ids.
func (b *Bucket) NextSequence() (uint64, error) {
	if b.life.Ended() {
		return 0, ErrTxClosed
	}
	n, err := b.b.NextSequence()
	return n, base.MapBoltErr(err)
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
		return fmt.Errorf("key of %d bytes in bucket %q: %w", len(key), base.Clip(string(b.name)), ErrKeyTooLarge)
	}
	return nil
}

func (b *Bucket) wrap(op string, key []byte, err error) error {
	if err == nil {
		return nil
	}
	return &keyError{op: op, key: base.Clip(string(key)), bucket: base.Clip(string(b.name)), err: base.FenceError(err)}
}

// keyError names the operation, key and bucket of an error. Its message
// drops the "oncekv: " of the error it wraps, so that it is not repeated.
type keyError struct {
	op, key, bucket string
	err             error
}

func (e *keyError) Error() string {
	return fmt.Sprintf("oncekv: %s %q in bucket %q: %s", e.op, e.key, e.bucket, strings.TrimPrefix(e.err.Error(), "oncekv: "))
}

func (e *keyError) Unwrap() error { return e.err }

// Cursor walks a user bucket in key order. Keys and values it returns are
// valid only until the transaction ends.
type Cursor struct {
	c    *bolt.Cursor
	b    *Bucket
	life *base.Life
	key  []byte // the key under the cursor, as the last move returned it
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

// Delete removes the key under the cursor: the one the last move returned.
// With no key under it (before the first move, past the end, or right
// after a Delete) it does nothing. Like Bucket.Delete, it keeps the key's
// fence and moves its version on.
func (c *Cursor) Delete() error {
	switch {
	case c.life.Ended():
		return ErrTxClosed
	case !c.b.b.Writable():
		return ErrTxNotWritable
	case c.key == nil:
		return nil
	}
	if err := c.b.touch("delete", c.key); err != nil {
		return err
	}
	c.key = nil // bbolt now points at the next key, which the caller has not seen
	return base.MapBoltErr(c.c.Delete())
}

func (c *Cursor) step(move func() ([]byte, []byte)) ([]byte, []byte) {
	if c.life.Ended() {
		return nil, nil
	}
	k, v := move()
	c.key = k
	return k, v
}
