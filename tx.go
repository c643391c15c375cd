package oncekv

import (
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
