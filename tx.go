package oncekv

import (
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bucket"
	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/layout"
)

// Bucket is package bucket's [bucket.Bucket]: a user bucket, with bbolt's
// semantics, valid until its transaction ends. Its methods:
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
type Bucket = bucket.Bucket

// Cursor is package bucket's [bucket.Cursor]: First, Last, Next, Prev and
// Seek(seek []byte) return (key, value []byte), nil keys past either end;
// Delete() error removes the key the last move returned, keeping its fence.
type Cursor = bucket.Cursor

// Tx is a transaction on the user buckets, given to the functions of
// Update, View and Apply; marks, fences and metadata are out of its sight.
// It, and all obtained from it, must not be used after that function
// returns.
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

// DeleteBucket deletes the user bucket name and its keys. Deleting a bucket
// that does not exist is not an error, unlike in bbolt, so a retried
// cleanup converges.
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

// OnCommit registers fn to run after the transaction has committed and the
// write lock is released, in the goroutine of the Update, Apply, ApplyBatch
// or Claim.Complete call, before it returns, in registration order. fn never
// runs for an attempt that rolled back, nor in View; a panic in fn goes on
// in the caller, skipping later hooks. fn may call any DB method. A nil fn,
// or one registered after the transaction ended, is ignored.
func (tx *Tx) OnCommit(fn func()) {
	if fn == nil || tx.life.Ended() || tx.w == nil {
		return
	}
	tx.w.onCommit(fn)
}

// Now returns the store's clock as the transaction sees it: in a write
// transaction the one reading its marks and leases use, in a read-only one
// a fresh reading.
func (tx *Tx) Now() time.Time {
	if tx.w != nil {
		return tx.w.now
	}
	if tx.db != nil {
		return tx.db.clock.read()
	}
	return time.Time{}
}

// onCommit gives fn to the op whose effect is running, if any, so that it
// runs in that op's caller; else to the transaction's caller.
func (w *writeTx) onCommit(fn func()) {
	if w.owner != nil {
		w.owner.hooks = append(w.owner.hooks, fn)
		return
	}
	w.hooks = append(w.hooks, fn)
}

// runHooks runs a committed transaction's hooks, in order, holding no lock.
func runHooks(hooks []func()) {
	for _, fn := range hooks {
		fn()
	}
}
