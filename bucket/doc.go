// Package bucket is the user's side of an oncekv file: [Bucket], a named
// key/value space with bbolt's semantics, and [Cursor], which walks one in
// key order. Buckets come from a transaction (oncekv.Tx.Bucket,
// Tx.CreateBucketIfNotExists) and are valid until it ends; the root
// package re-exports both types as oncekv.Bucket and oncekv.Cursor.
//
// On top of bbolt's Get, Put and Delete, a key may carry a fence
// ([Bucket.PutFenced], [Bucket.Fence]) that refuses a stale writer, and a
// version ([Bucket.PutIfVersion], [Bucket.Version]) for compare-and-set;
// the errors they return are in package fence.
//
// oncekv's own records (dedup marks, token counters, metadata) live in
// system buckets that no name passed here can reach: every user bucket
// name is put behind a prefix that no system bucket has. A key's fence and
// version live where its value does, in a header in front of the value
// that no read returns, so a fenced write is one B-tree operation; buckets
// created before such headers existed keep them in the system bucket of
// fences, and a deleted bucket's keys leave theirs there too.
package bucket
