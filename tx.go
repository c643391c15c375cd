package oncekv

import (
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bucket"
)

// Bucket is a user bucket: a named, ordered key/value space with bbolt's
// semantics. Values it returns are valid only until the transaction ends.
type Bucket = bucket.Bucket

// Cursor walks a user bucket in key order.
type Cursor = bucket.Cursor

// Tx is a transaction on the user buckets, handed to the functions given to
// Update, View and Apply. It reaches user buckets only: marks, fences and
// metadata are out of its sight. A Tx and everything obtained from it must
// not be used after that function returns.
type Tx struct {
	btx  *bolt.Tx
	life bucket.Life
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
	return bucket.UserBucket(tx.btx, name, &tx.life)
}

// CreateBucketIfNotExists returns the user bucket name, creating it first
// if needed.
func (tx *Tx) CreateBucketIfNotExists(name []byte) (*Bucket, error) {
	if err := tx.checkWrite(); err != nil {
		return nil, err
	}
	return bucket.CreateUserBucket(tx.btx, name, &tx.life)
}

// DeleteBucket deletes the user bucket name and all its keys. Deleting a
// bucket that does not exist is not an error, unlike in bbolt: in oncekv
// deleting what is not there never is (see Forget, Bucket.Delete), so a
// cleanup that is retried after a crash converges.
func (tx *Tx) DeleteBucket(name []byte) error {
	if err := tx.checkWrite(); err != nil {
		return err
	}
	_, err := bucket.DeleteUserBucket(tx.btx, name)
	return err
}

// ForEachBucket calls fn with the name of every user bucket, in order.
func (tx *Tx) ForEachBucket(fn func(name []byte) error) error {
	if tx.life.Ended() {
		return ErrTxClosed
	}
	return bucket.ForEachUserBucket(tx.btx, fn)
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
