package base

import (
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/fencestore"
)

// KeyFences is how the root package lists and raises the fence records
// of user keys, for moving a store, without package bucket exporting
// calls on a raw *bolt.Tx: bucket fills it in its init, like Buckets.
var KeyFences struct {
	// Each calls fn with every key record of the file: live is false for
	// a deleted key (or one of a deleted bucket) that keeps its record.
	Each func(tx *bolt.Tx, fn func(bucket, key []byte, r fencestore.Record, live bool) error) error
	// Raise makes the record of key in the user bucket named bucket at
	// least r, keeping its value; a key without a value keeps the record
	// as a deleted key does. life is the transaction's, whose records
	// every handle on the bucket shares.
	Raise func(tx *bolt.Tx, life *Life, bucket, key []byte, r fencestore.Record) error
}
