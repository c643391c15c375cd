package bucket

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/fence"
	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/fencestore"
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
	base.Buckets.Check = check
}

// Bucket is a user bucket: a named key/value space, apart from oncekv's
// own. It has bbolt's semantics: keys sort bytewise, a value returned by
// Get or a cursor is valid only until the transaction ends, and writes need
// a writable transaction.
//
// On top of them, a key may carry a fence and a version (see PutFenced and
// PutIfVersion), kept where no user call can reach them (see the package
// documentation).
type Bucket struct {
	b    *bolt.Bucket
	name []byte
	life *base.Life
	keys *fencestore.Keys // the fences and versions of the keys; opened on first use
	last []byte           // the key of this value's latest write, while they all appended (see packAppends)
}

// The top bits of a user bucket's sequence say how it keeps its keys'
// fences; NextSequence hands out the rest. Buckets created before these
// bits existed never set them: their sequence counts from 0 and could not
// have reached them.
const (
	// seqHeadered: every value has an entry header (fencestore.ParseEntry).
	seqHeadered = 1 << 63
	// seqRecords: some entry has a record, so a write without a fence must
	// read the key's header first, to carry its fence and count its
	// version. Until then a plain Put writes without reading.
	seqRecords = 1 << 62
	// seqMask is the user's sequence.
	seqMask = seqRecords - 1
)

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
	full := base.UserName(name)
	b := tx.Bucket(full)
	if b != nil && b.Writable() {
		return &Bucket{b: b, name: bytes.Clone(name), life: life}, nil
	}
	b, err := tx.CreateBucketIfNotExists(full) // creates it, or reports why it cannot
	if err != nil {
		return nil, fmt.Errorf("oncekv: create bucket %q: %w", base.Clip(string(name)), base.MapBoltErr(err))
	}
	// A new bucket keeps fences in headers, unless a deleted bucket of the
	// same name left its keys' records in the fences bucket: they go on
	// counting there, so a stale writer stays fenced off.
	if root := tx.Bucket(fencestore.Root); root != nil && !fencestore.Exists(root, name) {
		if err := b.SetSequence(seqHeadered); err != nil {
			return nil, fmt.Errorf("oncekv: create bucket %q: %w", base.Clip(string(name)), base.MapBoltErr(err))
		}
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
	ub := tx.Bucket(full)
	if ub == nil {
		return false, nil
	}
	if err := keepRecords(tx, ub, name); err != nil {
		return false, fmt.Errorf("oncekv: delete bucket %q: %w", base.Clip(string(name)), err)
	}
	if err := tx.DeleteBucket(full); err != nil {
		return false, fmt.Errorf("oncekv: delete bucket %q: %w", base.Clip(string(name)), base.MapBoltErr(err))
	}
	return true, nil
}

// keepRecords moves the records in the headers of ub, the user bucket
// name, to the fences bucket before ub is deleted: fences outlive their
// keys, and their bucket.
func keepRecords(tx *bolt.Tx, ub *bolt.Bucket, name []byte) error {
	if ub.Sequence()&seqRecords == 0 {
		return nil
	}
	root := tx.Bucket(fencestore.Root)
	if root == nil {
		return fmt.Errorf("%w: system bucket %q is missing", ErrCorrupt, fencestore.Root)
	}
	keys := fencestore.OpenKeys(root, name)
	return ub.ForEach(func(k, v []byte) error {
		e, err := fencestore.ParseEntry(v)
		if err != nil {
			return entryError(name, k, err)
		}
		if !e.HasRecord {
			return nil
		}
		return base.FenceError(keys.Set(k, e.Record))
	})
}

// check decodes the header of every entry of the user bucket name, if it
// keeps fences in headers, and reports each one that does not decode.
func check(tx *bolt.Tx, name []byte, report func(error) error) error {
	ub := tx.Bucket(base.UserName(name))
	if ub == nil || ub.Sequence()&seqHeadered == 0 {
		return nil
	}
	return ub.ForEach(func(k, v []byte) error {
		if _, err := fencestore.ParseEntry(v); err != nil {
			return report(entryError(name, k, err))
		}
		return nil
	})
}

// entryError reports an entry of the user bucket name whose header does
// not decode.
func entryError(name, key []byte, err error) error {
	return &base.RecordError{Bucket: string(base.UserName(name)), Key: string(key), Err: err}
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
//
// A value whose header is damaged reads as absent; once any key of the
// bucket has a fence or a version, every write of that key reports
// ErrCorrupt.
func (b *Bucket) Get(key []byte) []byte {
	if b.life.Ended() || len(key) == 0 {
		return nil
	}
	v := b.b.Get(key)
	if v == nil || !b.headered() {
		return v
	}
	e, err := fencestore.ParseEntry(v)
	if err != nil {
		return nil
	}
	return e.Value
}

// headered reports whether the bucket keeps fences in headers.
func (b *Bucket) headered() bool { return b.b.Sequence()&seqHeadered != 0 }

// hasRecords reports whether some entry of a headered bucket has a record.
func (b *Bucket) hasRecords() bool { return b.b.Sequence()&seqRecords != 0 }

// entry returns key's entry in a headered bucket, and its raw bytes, nil
// when the key has none.
func (b *Bucket) entry(key []byte) (fencestore.Entry, []byte, error) {
	raw := b.b.Get(key)
	if raw == nil {
		return fencestore.Entry{}, nil, nil
	}
	e, err := fencestore.ParseEntry(raw)
	if err != nil {
		return fencestore.Entry{}, raw, entryError(b.name, key, err)
	}
	return e, raw, nil
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
	if b.headered() {
		return b.putUnfenced("put", key, value)
	}
	if err := b.touch("put", key); err != nil {
		return err
	}
	return b.putValue("put", key, value)
}

// putUnfenced is Put in a headered bucket: it reads the key's header only
// when some key of the bucket has a record.
func (b *Bucket) putUnfenced(op string, key, value []byte) error {
	if !b.hasRecords() {
		return b.putRaw(op, key, fencestore.AppendPlain(make([]byte, 0, 1+len(value)), value))
	}
	e, _, err := b.entry(key)
	if err != nil {
		return b.wrap(op, key, err)
	}
	if !e.HasRecord {
		return b.putRaw(op, key, fencestore.AppendPlain(make([]byte, 0, 1+len(value)), value))
	}
	r, err := fencestore.Counted(e.Record)
	if err != nil {
		return b.wrap(op, key, err)
	}
	return b.putLive(op, key, r, value)
}

// putLive writes value with record r in a headered bucket.
func (b *Bucket) putLive(op string, key []byte, r fencestore.Record, value []byte) error {
	if seq := b.b.Sequence(); seq&seqRecords == 0 {
		if err := b.b.SetSequence(seq | seqRecords); err != nil {
			return b.wrap(op, key, err)
		}
	}
	return b.putRaw(op, key, fencestore.AppendLive(make([]byte, 0, fencestore.EntryHeaderSize+len(value)), r, value))
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
	if b.headered() {
		return b.deleteHeadered(key)
	}
	if err := b.touch("delete", key); err != nil {
		return err
	}
	return b.wrap("delete", key, b.b.Delete(key))
}

// deleteHeadered is Delete in a headered bucket: a key with a record keeps
// it in a tombstone.
func (b *Bucket) deleteHeadered(key []byte) error {
	if !b.hasRecords() {
		return b.wrap("delete", key, b.b.Delete(key))
	}
	e, raw, err := b.entry(key)
	switch {
	case err != nil:
		return b.wrap("delete", key, err)
	case raw == nil:
		return nil
	case !e.HasRecord:
		return b.wrap("delete", key, b.b.Delete(key))
	}
	r, err := fencestore.Counted(e.Record)
	if err != nil {
		return b.wrap("delete", key, err)
	}
	return b.wrap("delete", key, b.b.Put(key, fencestore.AppendGone(nil, r)))
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
func (b *Bucket) PutFenced(key, value []byte, presented uint64) error {
	if presented == 0 && b.checkPut(key, value) == nil {
		return b.wrap("put fenced", key, fence.ErrInvalidFence) // bad input, before any record is read
	}
	return b.putAdmitted("put fenced", key, value,
		func(k *fencestore.Keys) error { return k.Fenced(key, presented) },
		func(e fencestore.Entry) (fencestore.Record, error) {
			return fencestore.AdmitFenced(e.Record, presented)
		})
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
	return b.putAdmitted("put if version", key, value,
		func(k *fencestore.Keys) error { return k.IfVersion(key, version, b.b.Get(key) != nil) },
		func(e fencestore.Entry) (fencestore.Record, error) {
			return fencestore.AdmitVersion(e.Record, e.HasRecord, e.Exists(), version)
		})
}

// putAdmitted writes value to key if the key's fence or version lets it:
// admit checks and records it in the records bucket of a bucket that keeps
// one, admitEntry checks it against the key's header in a headered bucket
// and returns the record to write with the value. Every input is checked
// before a record is written, so an error changes nothing.
func (b *Bucket) putAdmitted(op string, key, value []byte, admit func(*fencestore.Keys) error,
	admitEntry func(fencestore.Entry) (fencestore.Record, error),
) error {
	if err := b.checkPut(key, value); err != nil {
		return err
	}
	if b.headered() {
		e, _, err := b.entry(key)
		if err != nil {
			return b.wrap(op, key, err)
		}
		r, err := admitEntry(e)
		if err != nil {
			return b.refused(op, key, err)
		}
		return b.putLive(op, key, r, value)
	}
	keys, err := b.fences()
	if err != nil {
		return err
	}
	if err := admit(keys); err != nil {
		return b.refused(op, key, err)
	}
	return b.putValue(op, key, value)
}

// refused reports a fenced or versioned write that was not admitted,
// counting it when its fence or version refused it.
func (b *Bucket) refused(op string, key []byte, err error) error {
	if errors.Is(err, fence.ErrFenced) || errors.Is(err, fence.ErrVersionConflict) || errors.Is(err, fence.ErrUnversioned) {
		b.life.Reject()
	}
	return b.wrap(op, key, err)
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
func (b *Bucket) fences() (*fencestore.Keys, error) {
	if b.keys != nil {
		return b.keys, nil
	}
	root := b.b.Tx().Bucket(fencestore.Root)
	if root == nil {
		return nil, fmt.Errorf("%w: system bucket %q is missing", ErrCorrupt, fencestore.Root)
	}
	b.keys = b.life.Keys(root, b.name)
	return b.keys, nil
}

// record returns key's fence record, zero when it has none or it cannot be
// read.
func (b *Bucket) record(key []byte) fencestore.Record {
	if b.life.Ended() || len(key) == 0 {
		return fencestore.Record{}
	}
	if b.headered() {
		e, _, _ := b.entry(key) // zero on a decode error, which writes report
		return e.Record
	}
	keys, err := b.fences()
	if err != nil {
		return fencestore.Record{}
	}
	r, _, _ := keys.Get(key) // zero on a decode error, which writes report
	return r
}

func (b *Bucket) checkPut(key, value []byte) error {
	if err := b.checkWrite(key); err != nil {
		return err
	}
	if len(value) > MaxValueSize { // the limit leaves room for the header
		return fmt.Errorf("value of %d bytes in bucket %q: %w", len(value), base.Clip(string(b.name)), ErrValueTooLarge)
	}
	return nil
}

func (b *Bucket) putValue(op string, key, value []byte) error {
	if value == nil {
		value = []byte{} // bbolt stores nil as empty anyway; say so explicitly
	}
	// bbolt copies the key itself, but keeps the value until the commit.
	return b.putRaw(op, key, bytes.Clone(value))
}

// putRaw stores raw, owned by bbolt from now on, as key's bytes in the
// bbolt bucket, packing pages full while the transaction only appends.
func (b *Bucket) putRaw(op string, key, raw []byte) error {
	b.packAppends(key)
	return b.wrap(op, key, b.b.Put(key, raw))
}

// ForEach calls fn for every key/value pair in key order. An error from fn
// stops the iteration and is returned. fn must not modify the bucket.
//
// In a headered bucket, deleted keys that keep their fence are skipped, and
// a value whose header is damaged stops the iteration with ErrCorrupt.
func (b *Bucket) ForEach(fn func(key, value []byte) error) error {
	if b.life.Ended() {
		return ErrTxClosed
	}
	if !b.headered() {
		return b.b.ForEach(fn)
	}
	return b.b.ForEach(func(k, v []byte) error {
		e, err := fencestore.ParseEntry(v)
		switch {
		case err != nil:
			return entryError(b.name, k, err)
		case !e.Exists():
			return nil
		}
		return fn(k, e.Value)
	})
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
	seq := b.b.Sequence()
	if seq&seqMask == seqMask {
		return 0, fmt.Errorf("oncekv: sequence of bucket %q: %w", base.Clip(string(b.name)), fence.ErrExhausted)
	}
	if err := b.b.SetSequence(seq + 1); err != nil {
		return 0, base.MapBoltErr(err)
	}
	return (seq + 1) & seqMask, nil
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
