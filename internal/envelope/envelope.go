// Package envelope is the envelope of every record oncekv keeps in its
// system buckets: a format-version byte, a body (msgpack, or a binary
// layout of the record's own for the mark) and a CRC-32C of both. The version lets each kind of record evolve on its own; the
// checksum tells corruption inside a record apart from a valid value, so a
// damaged record is an error, never a plausible wrong answer.
package envelope

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// recordVersion is the version byte in front of every record body. It is
// per record, not per file, so a record format can evolve one kind at a time.
const recordVersion = 1

// checksumSize is the CRC-32C trailer of every record.
const checksumSize = 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var (
	errShort    = errors.New("record shorter than its header and checksum")
	errChecksum = errors.New("checksum mismatch")
)

// encoders are reused: a mark is encoded on every unique Apply, and a fresh
// msgpack encoder per call would be most of the codec's cost.
var encoders = sync.Pool{New: func() any {
	buf := new(bytes.Buffer)
	enc := msgpack.NewEncoder(buf)
	return &encoder{buf: buf, enc: enc}
}}

type encoder struct {
	buf *bytes.Buffer
	enc *msgpack.Encoder
}

// Seal encodes a record: version byte, body written by fn, CRC-32C of both.
// The returned slice is freshly allocated and owned by the caller, as bbolt
// requires values to stay unchanged until the transaction ends.
func Seal(fn func(*msgpack.Encoder) error) []byte {
	e := encoders.Get().(*encoder)
	defer encoders.Put(e)
	e.buf.Reset()
	e.buf.WriteByte(recordVersion)
	if err := fn(e.enc); err != nil {
		// Encoding into a bytes.Buffer fails only on a programming error.
		panic(fmt.Sprintf("oncekv: encode record: %v", err))
	}
	out := make([]byte, e.buf.Len()+checksumSize)
	n := copy(out, e.buf.Bytes())
	binary.LittleEndian.PutUint32(out[n:], crc32.Checksum(out[:n], castagnoli))
	return out
}

// Alloc returns a record of a binary body of n bytes, with version as its
// version byte: the caller fills [Body] and seals it with [Finish]. Records
// that are not msgpack (the mark) are built this way, in one allocation.
func Alloc(version byte, n int) []byte {
	out := make([]byte, 1+n+checksumSize)
	out[0] = version
	return out
}

// Body returns the body of a record made by [Alloc], capped at its length
// so that an append past it cannot reach the checksum.
func Body(out []byte) []byte {
	n := len(out) - checksumSize
	return out[1:n:n]
}

// Finish writes the checksum of a record made by [Alloc].
func Finish(out []byte) {
	n := len(out) - checksumSize
	binary.LittleEndian.PutUint32(out[n:], crc32.Checksum(out[:n], castagnoli))
}

// Open checks a record's length and checksum and returns its version byte
// and body, which points into raw.
func Open(raw []byte) (version byte, body []byte, err error) {
	if len(raw) < 1+checksumSize {
		return 0, nil, errShort
	}
	n := len(raw) - checksumSize
	if crc32.Checksum(raw[:n], castagnoli) != binary.LittleEndian.Uint32(raw[n:]) {
		return 0, nil, errChecksum
	}
	return raw[0], raw[1:n], nil
}

// Unseal checks a record's version and checksum and runs fn over a decoder
// of its body. The decoder copies every byte slice it returns, so nothing fn
// keeps points into bbolt's memory map.
func Unseal(raw []byte, fields int, fn func(*msgpack.Decoder) error) error {
	version, body, err := Open(raw)
	if err != nil {
		return err
	}
	if version != recordVersion {
		return fmt.Errorf("record version %d, this build reads %d", version, recordVersion)
	}
	d := decoders.Get().(*decoder)
	defer decoders.Put(d)
	d.r.Reset(body)
	d.dec.Reset(&d.r)
	if err := expectArray(d.dec, fields); err != nil {
		return err
	}
	if err := fn(d.dec); err != nil {
		return err
	}
	if d.r.Len() != 0 {
		return fmt.Errorf("%d bytes after the record body", d.r.Len())
	}
	return nil
}

var decoders = sync.Pool{New: func() any {
	d := &decoder{}
	d.dec = msgpack.NewDecoder(&d.r)
	return d
}}

type decoder struct {
	r   bytes.Reader
	dec *msgpack.Decoder
}

// expectArray reads an array header and checks its length, so a record
// written by a future version with more fields is reported, not misread.
func expectArray(dec *msgpack.Decoder, fields int) error {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return err
	}
	if n != fields {
		return fmt.Errorf("record has %d fields, want %d", n, fields)
	}
	return nil
}
