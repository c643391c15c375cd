package oncekv

import (
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bucket"
	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/layout"
)

// Bucket is a user bucket: a named, ordered key/value space with bbolt's
// semantics, got from Tx.Bucket or Tx.CreateBucketIfNotExists and valid
// until the transaction ends. It is package bucket's type (see
// [bucket.Bucket] for the full documentation); its methods are:
//
//	Get(key []byte) []byte                                // nil when absent
//	Put(key, value []byte) error                          // moves a versioned key's version on
//	Delete(key []byte) error                              // absent is not an error; keeps the fence
//	PutFenced(key, value []byte, fence uint64) error      // only if fence > Fence(key), else *FenceError
//	Fence(key []byte) uint64                              // the stored fence, 0 when none
//	PutIfVersion(key, value []byte, version uint64) error // compare-and-set, else *VersionError
//	Version(key []byte) uint64                            // for PutIfVersion; 0 when unversioned
//	ForEach(fn func(key, value []byte) error) error       // every pair in key order
//	Cursor() *Cursor                                      // see Cursor
//	NextSequence() (uint64, error)                        // a persisted, strictly increasing id
//	Name() []byte
//	Writable() bool
//
// Keys are at most [bucket.MaxKeySize] bytes, values [bucket.MaxValueSize].
// A fence comes from [DB.NextFence], a claim's [Claim.Token], or any number
// that only grows; see package fence for what the errors mean.
type Bucket = bucket.Bucket

// Cursor walks a user bucket in key order; keys and values it returns are
// valid until the transaction ends. It is package bucket's type (see
// [bucket.Cursor]); its methods are First, Last, Next, Prev and
// Seek(seek []byte), each returning (key, value []byte), nil keys past
// either end, and Delete() error, which removes the key the last move
// returned, keeping its fence like [Bucket.Delete].
type Cursor = bucket.Cursor

// Tx is a transaction on the user buckets, handed to the functions given to
// Update, View and Apply. It reaches user buckets only: marks, fences and
// metadata are out of its sight. A Tx and everything obtained from it must
// not be used after that function returns.
type Tx struct {
	btx  *bolt.Tx
	life base.Life
	w    *writeTx // the write transaction, nil in a read-only one
	db   *DB      // set in read-only ones, for Now
}

func newTx(btx *bolt.Tx) *Tx { return &Tx{btx: btx} }

// end invalidates the Tx and its buckets and cursors.
func (tx *Tx) end() { tx.life.End() }

// Writable reports whether the transaction can write.
func (tx *Tx) Writable() bool { return !tx.life.Ended() && tx.btx.Writable() }

// Bucket returns the user bucket name, or nil if it does not exist.
func (tx *Tx) Bucket(name []byte) *Bucket {
	if tx.life.Ended() {
		return nil
	}
	b, _ := base.Buckets.Open(tx.btx, name, &tx.life).(*Bucket)
	return b
}

// CreateBucketIfNotExists returns the user bucket name, creating it first
// if needed.
func (tx *Tx) CreateBucketIfNotExists(name []byte) (*Bucket, error) {
	if err := tx.checkWrite(); err != nil {
		return nil, err
	}
	b, err := base.Buckets.Create(tx.btx, name, &tx.life)
	if err != nil {
		return nil, err
	}
	return b.(*Bucket), nil
}

// DeleteBucket deletes the user bucket name and all its keys. Deleting a
// bucket that does not exist is not an error, unlike in bbolt: in oncekv
// deleting what is not there never is (see Forget, Bucket.Delete), so a
// cleanup that is retried after a crash converges.
func (tx *Tx) DeleteBucket(name []byte) error {
	if err := tx.checkWrite(); err != nil {
		return err
	}
	_, err := base.Buckets.Delete(tx.btx, name)
	return err
}

// ForEachBucket calls fn with the name of every user bucket, in order.
func (tx *Tx) ForEachBucket(fn func(name []byte) error) error {
	if tx.life.Ended() {
		return ErrTxClosed
	}
	return layout.ForEachUserBucket(tx.btx, fn)
}

func (tx *Tx) checkWrite() error {
	switch {
	case tx.life.Ended():
		return ErrTxClosed
	case !tx.btx.Writable():
		return ErrTxNotWritable
	}
	return nil
}

// OnCommit registers fn to run once the transaction has committed, after
// the store's write lock is released, in the goroutine that called Update,
// Apply, ApplyBatch or Claim.Complete, before that call returns. Hooks run
// in the order they were registered. fn never runs when the transaction
// rolls back (an error, a panic, a failed commit), nor when Apply's group
// commit rolls back an attempt and runs the effect again: only the hooks of
// the attempt that committed run, once each.
//
// A panic in fn is the caller's panic: it propagates out of Update (or
// Apply) after the commit, and the hooks after it do not run. fn may call
// any DB method.
//
// A read-only transaction never commits, so in View a hook never runs; a
// nil fn, or one registered after the transaction ended, is ignored.
func (tx *Tx) OnCommit(fn func()) {
	if fn == nil || tx.life.Ended() || tx.w == nil {
		return
	}
	tx.w.onCommit(fn)
}

// Now returns the store's clock (Options.Now, never going backwards) as
// this transaction sees it: in a write transaction one reading taken when
// it began, the time its marks, leases and windows use; in a read-only
// transaction a fresh reading.
func (tx *Tx) Now() time.Time {
	if tx.w != nil {
		return tx.w.now
	}
	if tx.db != nil {
		return tx.db.clock.read()
	}
	return time.Time{}
}

// onCommit attributes fn to the op whose effect is running, if any, so the
// hook runs in that op's caller; otherwise to the transaction's own caller.
func (w *writeTx) onCommit(fn func()) {
	if w.owner != nil {
		w.owner.hooks = append(w.owner.hooks, fn)
		return
	}
	w.hooks = append(w.hooks, fn)
}

// runHooks runs the hooks of a committed transaction, in order. Its caller
// holds no lock, so a hook may panic or call back into the store.
func runHooks(hooks []func()) {
	for _, fn := range hooks {
		fn()
	}
}
