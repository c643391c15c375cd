package fencestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
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
	return appendInts(b, r.Fence, r.Version), nil
}

// UnmarshalBinary decodes and validates a record.
func (r *Record) UnmarshalBinary(raw []byte) error { return unsealInts(raw, &r.Fence, &r.Version) }

// The envelope of the records this package keeps is oncekv's record
// envelope (see internal/envelope): a version byte, a msgpack body, a
// CRC-32C of both. Their body is always a msgpack array of full-width
// unsigned integers, so it has a fixed size and is written and read here
// byte by byte: going through a msgpack encoder and decoder cost a
// PutFenced about a fifth of its time (BenchmarkPutFencedVsPut's profile),
// for bytes that never vary in shape. The bytes are the ones the encoder
// wrote, so records written before read the same.
const (
	intsVersion  = 1     // the envelope's version byte of these records
	headerSize   = 2     // the version byte, then the array header
	fixArray     = 0x90  // msgpack's fixarray: the count is in the low nibble
	maxInts      = 0xf   // the most a fixarray header counts
	uint64Code   = 0xcf  // msgpack's uint64, the full-width form and the only one written
	intSize      = 1 + 8 // uint64Code, then the integer, big-endian
	checksumSize = 4     // CRC-32C of the rest, little-endian
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sealInts encodes a record of unsigned integers: a token counter holds one,
// a key record two. Each is encoded at full width, so a record's size does
// not change as its numbers grow.
func sealInts(vals ...uint64) []byte { return appendInts(nil, vals...) }

// appendInts appends the record sealInts encodes to b, growing b at most
// once.
func appendInts(b []byte, vals ...uint64) []byte {
	b = slices.Grow(b, headerSize+intSize*len(vals)+checksumSize)
	start := len(b)
	b = append(b, intsVersion, fixArray|byte(len(vals)))
	for _, v := range vals {
		b = binary.BigEndian.AppendUint64(append(b, uint64Code), v)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// unsealInts decodes a record of len(vals) integers into vals, checking
// everything sealInts writes: the checksum, the version, the field count,
// so a record of another kind is caught even when its checksum is right,
// and the full-width form of each field, so a record has exactly one
// encoding. It never reads past raw.
func unsealInts(raw []byte, vals ...*uint64) error {
	if len(raw) < 1+checksumSize {
		return errors.New("record shorter than its header and checksum")
	}
	n := len(raw) - checksumSize
	if crc32.Checksum(raw[:n], castagnoli) != binary.LittleEndian.Uint32(raw[n:]) {
		return errors.New("checksum mismatch")
	}
	if raw[0] != intsVersion {
		return fmt.Errorf("record version %d, this build reads %d", raw[0], intsVersion)
	}
	body := raw[1:n]
	if len(body) == 0 || body[0]&^maxInts != fixArray {
		return errors.New("record body is not a short msgpack array")
	}
	if got := int(body[0] & maxInts); got != len(vals) {
		return fmt.Errorf("record has %d fields, want %d", got, len(vals))
	}
	body = body[1:]
	for i, v := range vals {
		if len(body) < intSize || body[0] != uint64Code {
			return fmt.Errorf("field %d is not a full-width unsigned integer", i)
		}
		*v = binary.BigEndian.Uint64(body[1:intSize])
		body = body[intSize:]
	}
	if len(body) != 0 {
		return fmt.Errorf("%d bytes after the record body", len(body))
	}
	return nil
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
