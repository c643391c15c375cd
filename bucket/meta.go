package bucket

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/oncekv/oncekv/internal/record"
	bolt "go.etcd.io/bbolt"
)

// expiryKey holds the expiry record in MetaRoot.
var expiryKey = []byte("expiry")

// Expiry is the persisted state of window expiry and of the store's clock.
type Expiry struct {
	// Floor: every window starting before it has expired. Windows below
	// it that are still on disk are being deleted and are ignored.
	Floor int64
	// ClockHigh is the latest clock reading the store had made when the
	// record was written (Unix nanoseconds), so that a clock stepped back
	// across a restart cannot revive a lease that had expired.
	ClockHigh int64
}

const expiryFields = 2

// Marshal encodes the record.
func (e Expiry) Marshal() []byte {
	return record.Seal(func(enc *msgpack.Encoder) error {
		return errors.Join(enc.EncodeArrayLen(expiryFields), enc.EncodeInt64(e.Floor), enc.EncodeInt64(e.ClockHigh))
	})
}

// Unmarshal decodes and validates the record.
func (e *Expiry) Unmarshal(raw []byte) error {
	return record.Unseal(raw, expiryFields, func(dec *msgpack.Decoder) (err error) {
		if e.Floor, err = dec.DecodeInt64(); err != nil {
			return err
		}
		e.ClockHigh, err = dec.DecodeInt64()
		return err
	})
}

// ReadExpiry returns the expiry record; a store that never expired
// anything has the zero record with the lowest possible floor.
func ReadExpiry(tx *bolt.Tx) (Expiry, error) {
	e := Expiry{Floor: minInt64, ClockHigh: minInt64}
	meta := tx.Bucket(MetaRoot)
	if meta == nil {
		return e, fmt.Errorf("%w: system bucket %q is missing", ErrCorrupt, MetaRoot)
	}
	raw := meta.Get(expiryKey)
	if raw == nil {
		return e, nil
	}
	if err := e.Unmarshal(raw); err != nil {
		return e, &RecordError{Bucket: string(MetaRoot), Key: string(expiryKey), Err: err}
	}
	return e, nil
}

const minInt64 = -1 << 63

// WriteExpiry stores the expiry record.
func WriteExpiry(tx *bolt.Tx, e Expiry) error {
	return mapBoltErr(tx.Bucket(MetaRoot).Put(expiryKey, e.Marshal()))
}

func filterKey(start int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(start)^(1<<63))
}

// filters returns the filters bucket, creating it in a writable
// transaction: files created before it existed lack it.
func filters(tx *bolt.Tx) (*bolt.Bucket, error) {
	if b := tx.Bucket(FiltersRoot); b != nil || !tx.Writable() {
		return b, nil
	}
	b, err := tx.CreateBucket(FiltersRoot)
	return b, mapBoltErr(err)
}

// PutFilter stores the encoded filter of the window starting at start. The
// encoding carries its own checksum (see package bloom).
func PutFilter(tx *bolt.Tx, start int64, encoded []byte) error {
	b, err := filters(tx)
	if err != nil {
		return err
	}
	return mapBoltErr(b.Put(filterKey(start), encoded))
}

// GetFilter returns the stored filter of the window starting at start,
// copied out of the transaction, or nil.
func GetFilter(tx *bolt.Tx, start int64) []byte {
	b := tx.Bucket(FiltersRoot)
	if b == nil {
		return nil
	}
	if v := b.Get(filterKey(start)); v != nil {
		return append([]byte(nil), v...)
	}
	return nil
}

// DeleteFilter removes the stored filter of the window starting at start.
func DeleteFilter(tx *bolt.Tx, start int64) error {
	b, err := filters(tx)
	if err != nil || b == nil {
		return err
	}
	return mapBoltErr(b.Delete(filterKey(start)))
}
