// Package fencestore stores oncekv's ordering state: the fencing-token
// counters, in the system bucket of fences, and the fence and version of
// every user key written with one, in a header in front of the key's value
// (Entry, for user buckets created since headers exist) or in the system
// bucket of fences (Keys, for user buckets created before, and for the
// keys of a deleted user bucket). The public vocabulary (the errors and error
// types) is package fence; this package is the storage behind it, which
// only oncekv may call.
//
// # Layout
//
// The first byte of each entry in the fences bucket says what it is (the
// caller passes the bucket in, so this package does not depend on the
// file's root layout):
//
//	't' resource          token counter: the last token NextFence issued for resource
//	'c'                   token counter: the last claim token issued
//	'k' user bucket name  a bucket: user key -> key record (fence, version)
//
// Counters and key records are msgpack arrays of integers in oncekv's
// record envelope (a format-version byte, the msgpack body, a CRC-32C of
// both; see internal/envelope). A record that fails any check is a
// *RecordError, never a silently smaller fence.
//
// Nothing here is ever deleted: a counter that went back to zero could issue
// a token twice, and a fence dropped with its key would let a stale writer
// resurrect the key. Every function runs inside the caller's bbolt write
// transaction, so a token or a fence is durable exactly when that
// transaction commits.
package fencestore

import (
	"math"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/fence"
)

// The first byte of every entry in the fences bucket; see the package
// documentation for the layout.
const (
	kindToken = 't'
	kindClaim = 'c'
	kindKeys  = 'k'
)

// Root is the name of the system bucket of fences at the root of the file.
var Root = []byte("oncekv.fences")

// claimCounter is the key of the claim token counter.
var claimCounter = []byte{kindClaim}

// MaxResourceSize is the longest resource name Next accepts: a bbolt key
// less the kind byte.
const MaxResourceSize = bolt.MaxKeySize - 1

// Next issues the next token of resource in fences, the system bucket of
// fences, and returns it: one more than the last one issued, starting at 1.
// The counter is written in the caller's transaction, so the token is
// durable, and never issued again, once that transaction commits.
func Next(fences *bolt.Bucket, resource []byte) (uint64, error) {
	if len(resource) == 0 {
		return 0, fence.ErrResourceRequired
	}
	key := make([]byte, 0, 1+len(resource))
	return bump(fences, append(append(key, kindToken), resource...))
}

// NextClaim issues the next claim token. Claim tokens come from one counter
// for the whole store, so a token is unique across every key, and a
// takeover always gets a greater one. It is a fence, never an idempotency
// key: a takeover changes it.
func NextClaim(fences *bolt.Bucket) (uint64, error) {
	return bump(fences, claimCounter)
}

// LastClaim returns the last claim token issued, 0 if none was.
func LastClaim(fences *bolt.Bucket) (uint64, error) { return counter(fences, claimCounter) }

// counter returns the counter at key, 0 if it was never bumped.
func counter(fences *bolt.Bucket, key []byte) (uint64, error) {
	var last uint64
	if raw := fences.Get(key); raw != nil {
		if err := unsealInts(raw, &last); err != nil {
			return 0, &RecordError{Key: key, Err: err}
		}
	}
	return last, nil
}

// bump adds one to the counter at key and returns the new value.
func bump(fences *bolt.Bucket, key []byte) (uint64, error) {
	last, err := counter(fences, key)
	if err != nil {
		return 0, err
	}
	next, err := increment(last)
	if err != nil {
		return 0, err
	}
	return next, fences.Put(key, sealInts(next))
}

func increment(n uint64) (uint64, error) {
	if n == math.MaxUint64 {
		return 0, fence.ErrExhausted
	}
	return n + 1, nil
}

// Keys is the records of the keys of one user bucket.
//
// A key gets a record on its first fenced (Fenced) or versioned (IfVersion)
// write. From then on every write of the key counts in its version,
// whichever method made it: Touch is for the writes that carry neither a
// fence nor a version (plain Put, Delete). Keys without a record cost those
// writes one look-up, and a bucket with no record at all one look-up of the
// bucket. Records outlive their keys: Delete keeps the fence, so a stale
// writer cannot bring a deleted key back.
//
// A Keys keeps what it learned about its records bucket for the rest of the
// transaction, including that there is none yet; so every write of one
// user bucket in one transaction must go through the same Keys.
type Keys struct {
	fences *bolt.Bucket
	name   []byte       // the records bucket's name in fences
	b      *bolt.Bucket // the records bucket, once looked up or created
	looked bool         // b was looked up, and is nil if there is none
}

// OpenKeys returns the records of the user bucket named userBucket, inside
// fences.
func OpenKeys(fences *bolt.Bucket, userBucket []byte) *Keys {
	name := make([]byte, 0, 1+len(userBucket))
	return &Keys{fences: fences, name: append(append(name, kindKeys), userBucket...)}
}

// records returns the records bucket, or nil when no key has a record.
func (k *Keys) records() *bolt.Bucket {
	if !k.looked {
		k.b, k.looked = k.fences.Bucket(k.name), true
	}
	return k.b
}

// Get returns key's record, and whether it has one.
func (k *Keys) Get(key []byte) (r Record, ok bool, err error) {
	b := k.records()
	if b == nil {
		return Record{}, false, nil
	}
	raw := b.Get(key)
	if raw == nil {
		return Record{}, false, nil
	}
	if err := r.UnmarshalBinary(raw); err != nil {
		return Record{}, false, &RecordError{Bucket: k.name, Key: key, Err: err}
	}
	return r, true, nil
}

// put stores key's record with its version moved on by one.
func (k *Keys) put(key []byte, r Record) error {
	r, err := Counted(r)
	if err != nil {
		return err
	}
	return k.Set(key, r)
}

// Set stores r as key's record as it is: for a record that was counted
// already, such as one moved here from a bucket being deleted.
func (k *Keys) Set(key []byte, r Record) error {
	if k.records() == nil {
		var err error
		if k.b, err = k.fences.CreateBucketIfNotExists(k.name); err != nil {
			return err
		}
	}
	enc, _ := r.AppendBinary(nil)
	return k.b.Put(key, enc)
}

// Exists reports whether the user bucket named userBucket has a records
// bucket in fences: a user bucket created again after a Delete must go on
// with the records its keys had.
func Exists(fences *bolt.Bucket, userBucket []byte) bool {
	return OpenKeys(fences, userBucket).records() != nil
}

// Counted returns r with one more write counted in its version.
func Counted(r Record) (Record, error) {
	v, err := increment(r.Version)
	r.Version = v
	return r, err
}

// AdmitFenced returns the record of a key after a write carrying the fence
// presented, given its record r now (zero when it has none): a
// *fence.Error (fence.ErrFenced) unless presented is strictly greater than
// the stored fence, fence.ErrInvalidFence for 0.
func AdmitFenced(r Record, presented uint64) (Record, error) {
	if presented == 0 {
		return r, fence.ErrInvalidFence
	}
	if presented <= r.Fence {
		return r, &fence.Error{Stored: r.Fence, Presented: presented}
	}
	r.Fence = presented
	return Counted(r)
}

// AdmitVersion returns the record of a key after a compare-and-set that
// read it at version, given its record r now, whether it has one (ok) and
// whether it has a value (exists); see IfVersion.
func AdmitVersion(r Record, ok, exists bool, version uint64) (Record, error) {
	switch {
	case !ok && exists && version == 0:
		return r, fence.ErrUnversioned
	case r.Version != version:
		return r, &fence.VersionError{Stored: r.Version, Presented: version}
	}
	return Counted(r)
}

// Fenced admits a write of key carrying the fence presented, and records
// it: it returns a *fence.Error (fence.ErrFenced) unless presented is
// strictly greater than the stored fence, and fence.ErrInvalidFence for 0. On an error nothing is written.
func (k *Keys) Fenced(key []byte, presented uint64) error {
	if presented == 0 {
		return fence.ErrInvalidFence
	}
	r, _, err := k.Get(key)
	if err != nil {
		return err
	}
	if r, err = AdmitFenced(r, presented); err != nil {
		return err
	}
	return k.Set(key, r)
}

// IfVersion admits a compare-and-set of key that read it at version, and
// records the write; exists says whether the key has a value now. It
// returns a *fence.VersionError (fence.ErrVersionConflict) when the version moved on.
//
// Version 0 means "the key has no record": so a compare-and-set from 0 is
// a create, and succeeds only while the key does not exist. A key that
// exists without a record was written only by plain Put, which leaves no
// trace on such a key, so a Put racing with the compare-and-set could not
// be told from none; that case is fence.ErrUnversioned, not a silent lost update.
// On an error nothing is written.
func (k *Keys) IfVersion(key []byte, version uint64, exists bool) error {
	r, ok, err := k.Get(key)
	if err != nil {
		return err
	}
	if r, err = AdmitVersion(r, ok, exists, version); err != nil {
		return err
	}
	return k.Set(key, r)
}

// Touch counts a write of key that carries no fence or version (a plain Put
// or a Delete) in the key's version, if the key has a record. Without it, a
// plain Put between a read and a compare-and-set would go unseen and be
// overwritten.
func (k *Keys) Touch(key []byte) error {
	if k.records() == nil {
		return nil
	}
	r, ok, err := k.Get(key)
	if !ok || err != nil {
		return err
	}
	return k.put(key, r)
}
