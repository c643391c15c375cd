package layout

import (
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/base"
)

// ParkedRoot indexes the parked keys: mark key -> [ParkedEntry]. A parked mark
// stays in a window like any mark, so every look-up finds it; the index
// lets expiry carry it to a newer window before its own expires, and the
// operator list it, without reading any window. The bucket's sequence
// counts its keys. It is created by the first key parked.
var ParkedRoot = []byte("oncekv.parked")

// ParkedEntry is the index record of a parked key.
type ParkedEntry struct {
	// Window is the start of the window holding the key's PARKED mark.
	Window int64
	// At is when the key was parked, Unix nanoseconds.
	At int64
}

// Marshal encodes the record.
func (p ParkedEntry) Marshal() []byte { return sealInt64Pair(p.Window, p.At) }

// Unmarshal decodes and validates the record.
func (p *ParkedEntry) Unmarshal(raw []byte) (err error) {
	p.Window, p.At, err = unsealInt64Pair(raw)
	return err
}

// PutParked records mkey as parked in the window starting at p.Window,
// creating the index when it is the first.
func PutParked(tx *bolt.Tx, mkey []byte, p ParkedEntry) error {
	b, err := tx.CreateBucketIfNotExists(ParkedRoot)
	if err != nil {
		return base.MapBoltErr(err)
	}
	if b.Get(mkey) == nil {
		if err := b.SetSequence(b.Sequence() + 1); err != nil {
			return base.MapBoltErr(err)
		}
	}
	return base.MapBoltErr(b.Put(mkey, p.Marshal()))
}

// GetParked returns mkey's index record; ok is false when it has none.
func GetParked(tx *bolt.Tx, mkey []byte) (p ParkedEntry, ok bool, err error) {
	b := tx.Bucket(ParkedRoot)
	if b == nil {
		return p, false, nil
	}
	raw := b.Get(mkey)
	if raw == nil {
		return p, false, nil
	}
	if err := p.Unmarshal(raw); err != nil {
		return p, false, parkedError(mkey, err)
	}
	return p, true, nil
}

// DeleteParked removes mkey from the index, if it is there.
func DeleteParked(tx *bolt.Tx, mkey []byte) error {
	b := tx.Bucket(ParkedRoot)
	if b == nil || b.Get(mkey) == nil {
		return nil
	}
	if err := b.SetSequence(b.Sequence() - 1); err != nil {
		return base.MapBoltErr(err)
	}
	return base.MapBoltErr(b.Delete(mkey))
}

// CountParked returns the number of parked keys.
func CountParked(tx *bolt.Tx) uint64 {
	if b := tx.Bucket(ParkedRoot); b != nil {
		return b.Sequence()
	}
	return 0
}

// ForEachParked calls fn with every parked key, in key order, until fn
// returns an error. mkey points into tx's memory: fn copies what it keeps,
// and must not write the index.
func ForEachParked(tx *bolt.Tx, fn func(mkey []byte, p ParkedEntry) error) error {
	b := tx.Bucket(ParkedRoot)
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, v []byte) error {
		if _, _, ok := SplitMarkKey(k); !ok || v == nil {
			return parkedError(k, errors.New("not a mark key"))
		}
		var p ParkedEntry
		if err := p.Unmarshal(v); err != nil {
			return parkedError(k, err)
		}
		return fn(k, p)
	})
}

func parkedError(mkey []byte, err error) error {
	key := fmt.Sprintf("%x", mkey)
	if h, k, ok := SplitMarkKey(mkey); ok {
		key = h + "/" + k
	}
	return &base.RecordError{Bucket: string(ParkedRoot), Key: key, Err: err}
}
