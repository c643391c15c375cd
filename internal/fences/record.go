package fences

import (
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/oncekv/oncekv/internal/record"
)

// Record is what the store keeps for a user key written with a fence or a
// version. It is stored in oncekv's record envelope (version byte, msgpack
// body, CRC-32C), like every system record.
type Record struct {
	// Fence is the greatest fence a write of the key carried; 0 when none
	// did.
	Fence uint64
	// Version counts the writes of the key since its first fenced or
	// versioned write; 0 when it has none.
	Version uint64
}

// AppendBinary appends the encoded record to b.
func (r Record) AppendBinary(b []byte) ([]byte, error) {
	return append(b, sealInts(r.Fence, r.Version)...), nil
}

// UnmarshalBinary decodes and validates a record.
func (r *Record) UnmarshalBinary(raw []byte) error { return unsealInts(raw, &r.Fence, &r.Version) }

// sealInts encodes a record of unsigned integers: a token counter holds one,
// a key record two. Each is encoded at full width, so a record's size does
// not change as its numbers grow.
func sealInts(vals ...uint64) []byte {
	return record.Seal(func(enc *msgpack.Encoder) error {
		errs := []error{enc.EncodeArrayLen(len(vals))}
		for _, v := range vals {
			errs = append(errs, enc.EncodeUint64(v))
		}
		return errors.Join(errs...)
	})
}

// unsealInts decodes a record of len(vals) integers into vals. The field
// count is checked, so a record of another kind is caught even when its
// checksum is right, and so is the full-width form, so a record has exactly
// one encoding.
func unsealInts(raw []byte, vals ...*uint64) error {
	return record.Unseal(raw, len(vals), func(dec *msgpack.Decoder) (err error) {
		for i, v := range vals {
			if c, err := dec.PeekCode(); err != nil || c != msgpcode.Uint64 {
				return fmt.Errorf("field %d is not a full-width unsigned integer", i)
			}
			if *v, err = dec.DecodeUint64(); err != nil {
				return err
			}
		}
		return nil
	})
}

// RecordError is a record of the fences bucket that failed to decode. The
// caller, which knows the bucket's name, reports it with its own record
// error type.
type RecordError struct {
	Bucket []byte // the sub-bucket holding it, nil for the fences bucket itself
	Key    []byte // the record's key in that bucket
	Err    error  // what was wrong
}

// Error implements error.
func (e *RecordError) Error() string {
	return fmt.Sprintf("oncekv: fence record %q in %q does not decode: %v", e.Key, e.Bucket, e.Err)
}

// Unwrap returns what was wrong.
func (e *RecordError) Unwrap() error { return e.Err }
