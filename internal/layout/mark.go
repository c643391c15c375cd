package layout

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/oncekv/oncekv/internal/envelope"
)

// State is the state of a mark, as in the article's processed_messages table.
type State uint8

// The states of a mark. Zero is not a state, so an all-zero record is caught.
const (
	// InProgress: a claim holds the key until LeaseUntil.
	InProgress State = 1
	// Done: the effect committed; Response is what every duplicate gets.
	Done State = 2
	// Failed: the effect failed permanently; Error is what every duplicate
	// gets.
	Failed State = 3
	// Parked: a takeover's probe could not tell whether the attempt it took
	// over applied its effect; the key waits for an operator. Token and
	// AttemptStart are the attempt in doubt's.
	Parked State = 4
)

// String returns the article's name of the state.
func (s State) String() string {
	switch s {
	case InProgress:
		return "IN_PROGRESS"
	case Done:
		return "DONE"
	case Failed:
		return "FAILED"
	case Parked:
		return "PARKED"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// HashSize is the size of the SHA-256 a request's payload hashes to.
const HashSize = 32

// FingerprintSize is how much of that hash a mark stores and compares.
// 16 bytes tell two payloads of one key apart with a chance of a collision
// of 2^-128 per pair, which no retry storm approaches, and halve what the
// hash costs on disk.
const FingerprintSize = 16

// Mark is the record of one (handler, key): everything a duplicate needs to
// be answered without running the effect again.
type Mark struct {
	State State
	// PayloadHash is the SHA-256 of the first payload. Only its first
	// FingerprintSize bytes are stored: a decoded mark has the rest zero,
	// whatever wrote it, so requests compare with [Fingerprint] of theirs.
	PayloadHash [HashSize]byte
	Response    []byte // stored response; nil and empty stay distinct
	Error       string // message of the permanent error of a Failed mark
	LeaseUntil  int64  // Unix nanoseconds; InProgress only
	Token       uint64 // fencing token of the claim that wrote it; 0 for Apply
	FirstSeen   int64  // Unix nanoseconds when the mark was first written
	// AttemptStart is when the attempt an IN_PROGRESS or PARKED mark
	// records took the key, Unix nanoseconds; 0 means FirstSeen (the
	// key's first attempt), so only a takeover stores it.
	AttemptStart int64
	// Takeovers counts the claims that took the key over from an attempt
	// that recorded no outcome (its lease ran out, it was released or
	// orphaned).
	Takeovers uint64
}

// Fingerprint returns what a mark keeps of the payload hash sum: its first
// FingerprintSize bytes, the rest zero, so that a request's hash and a
// decoded mark's compare equal exactly when the stored bytes do.
func Fingerprint(sum [HashSize]byte) [HashSize]byte {
	clear(sum[FingerprintSize:])
	return sum
}

// The mark record (format 3) is a binary layout rather than msgpack: a
// mark is written on every unique Apply and read on every duplicate, and
// most of its fields are absent or small. After the version byte:
//
//	head        1 byte: the state in bits 0-1, then one bit per optional
//	            field present (response, error, lease, token); bits 6-7 zero
//	fingerprint FingerprintSize bytes
//	first seen  8 bytes, little-endian: a Unix time in nanoseconds takes 9
//	            bytes as a varint, so fixed is the shorter form
//	response    uvarint length and bytes, if present (nil is absent, empty
//	            is present with length 0)
//	error       uvarint length and bytes, if present (only when not empty)
//	lease       zigzag varint, if present (only when not zero)
//	token       uvarint, if present (only when not zero)
//
// then the record's CRC-32C. Every optional field has one encoding, so
// that a record the decoder accepts encodes back to the same bytes.
//
// Record version 3 (format 4) holds what version 2 cannot: the PARKED
// state and a takeover's attempt. Its head is a uvarint: the state in bits
// 0-2, the four field bits above at 3-6, then attempt start (bit 7: 8
// bytes, little-endian, after the token) and takeovers (bit 8: a uvarint,
// last). A mark version 2 can hold is always written as version 2, and a
// version 3 record of one is refused: one encoding per mark, as above.
const (
	markVersion   = 2 // record version of the binary mark; 1 is the msgpack one
	markVersionV3 = 3 // the binary mark with a wider head (see above)
	legacyVersion = 1

	stateBits   = 0b11
	hasResponse = 1 << 2
	hasError    = 1 << 3
	hasLease    = 1 << 4
	hasToken    = 1 << 5
	fieldBits   = hasResponse | hasError | hasLease | hasToken
	knownBits   = stateBits | fieldBits

	// The head of version 3: the field bits shifted up one, for a state in
	// three bits, then the attempt's.
	stateBitsV3  = 0b111
	v3Shift      = 1
	hasAttempt   = 1 << 7
	hasTakeovers = 1 << 8
	knownBitsV3  = stateBitsV3 | fieldBits<<v3Shift | hasAttempt | hasTakeovers

	fixedBody = 1 + FingerprintSize + 8
)

// needsV3 reports whether m has what only record version 3 holds.
func (m *Mark) needsV3() bool {
	return m.State > Failed || m.AttemptStart != 0 || m.Takeovers != 0
}

// Marshal encodes the mark in the current format, in one allocation: the
// value bbolt keeps until the transaction ends.
func (m *Mark) Marshal() []byte {
	var fields uint64
	n := FingerprintSize + 8
	if m.Response != nil {
		fields |= hasResponse
		n += uvarintLen(uint64(len(m.Response))) + len(m.Response)
	}
	if m.Error != "" {
		fields |= hasError
		n += uvarintLen(uint64(len(m.Error))) + len(m.Error)
	}
	if m.LeaseUntil != 0 {
		fields |= hasLease
		n += uvarintLen(zigzag(m.LeaseUntil))
	}
	if m.Token != 0 {
		fields |= hasToken
		n += uvarintLen(m.Token)
	}
	version, head := byte(markVersion), uint64(m.State)&stateBits|fields
	if m.needsV3() {
		version, head = markVersionV3, uint64(m.State)&stateBitsV3|fields<<v3Shift
		if m.AttemptStart != 0 {
			head |= hasAttempt
			n += 8
		}
		if m.Takeovers != 0 {
			head |= hasTakeovers
			n += uvarintLen(m.Takeovers)
		}
	}
	n += uvarintLen(head)
	out := envelope.Alloc(version, n)
	b := binary.AppendUvarint(envelope.Body(out)[:0], head)
	b = append(b, m.PayloadHash[:FingerprintSize]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(m.FirstSeen))
	if m.Response != nil {
		b = binary.AppendUvarint(b, uint64(len(m.Response)))
		b = append(b, m.Response...)
	}
	if m.Error != "" {
		b = binary.AppendUvarint(b, uint64(len(m.Error)))
		b = append(b, m.Error...)
	}
	if m.LeaseUntil != 0 {
		b = binary.AppendUvarint(b, zigzag(m.LeaseUntil))
	}
	if m.Token != 0 {
		b = binary.AppendUvarint(b, m.Token)
	}
	if head&hasAttempt != 0 {
		b = binary.LittleEndian.AppendUint64(b, uint64(m.AttemptStart))
	}
	if head&hasTakeovers != 0 {
		b = binary.AppendUvarint(b, m.Takeovers)
	}
	if len(b) != n {
		panic("oncekv: mark size miscounted") // a bug here, never input
	}
	envelope.Finish(out)
	return out
}

var (
	errMarkHead  = errors.New("mark header has unknown bits set")
	errVarint    = errors.New("malformed or non-minimal varint")
	errFieldSize = errors.New("field longer than the record")
	errEmptyOpt  = errors.New("optional field present with its zero value")
	// errNotCanonical: a version 3 record of a mark version 2 holds.
	errNotCanonical = errors.New("mark record version 3 of a mark version 2 holds")
)

// Unmarshal decodes and validates a mark, of the current format or of the
// msgpack one files before format 3 hold. The decoded Response is a copy,
// so it stays valid after the transaction that read it; besides it (and
// the Error of a Failed mark) decoding allocates nothing.
func (m *Mark) Unmarshal(raw []byte) error {
	version, b, err := envelope.Open(raw)
	switch {
	case err != nil:
		return err
	case version == legacyVersion:
		return m.unmarshalLegacy(raw)
	case version != markVersion && version != markVersionV3:
		return fmt.Errorf("mark record version %d, this build reads %d to %d", version, legacyVersion, markVersionV3)
	case len(b) < fixedBody:
		return fmt.Errorf("mark body is %d bytes, want at least %d", len(b), fixedBody)
	}
	d := fieldDecoder{b: b}
	var fields uint64
	if version == markVersion {
		head := uint64(b[0])
		d.b = b[1:]
		if head&^knownBits != 0 {
			return errMarkHead
		}
		fields, err = head&fieldBits, m.setState(head&stateBits, Failed)
	} else {
		head := d.uvarint()
		switch {
		case d.err != nil:
			return d.err
		case head&^knownBitsV3 != 0:
			return errMarkHead
		}
		fields = head>>v3Shift&fieldBits | head&(hasAttempt|hasTakeovers)
		err = m.setState(head&stateBitsV3, Parked)
	}
	if err != nil {
		return err
	}
	if len(d.b) < FingerprintSize+8 {
		return fmt.Errorf("mark body is %d bytes, want at least %d", len(b), len(b)-len(d.b)+FingerprintSize+8)
	}
	m.PayloadHash = [HashSize]byte{}
	copy(m.PayloadHash[:], d.b[:FingerprintSize])
	m.FirstSeen = int64(binary.LittleEndian.Uint64(d.b[FingerprintSize:]))
	d.b = d.b[FingerprintSize+8:]
	m.Response = nil
	if fields&hasResponse != 0 {
		// append to a non-nil empty slice keeps an empty response apart from
		// a missing one without allocating for it.
		m.Response = append([]byte{}, d.bytes()...)
	}
	m.Error = ""
	if fields&hasError != 0 {
		m.Error = string(d.nonEmpty(d.bytes()))
	}
	m.LeaseUntil = 0
	if fields&hasLease != 0 {
		m.LeaseUntil = unzigzag(d.nonZero(d.uvarint()))
	}
	m.Token = 0
	if fields&hasToken != 0 {
		m.Token = d.nonZero(d.uvarint())
	}
	m.AttemptStart = 0
	if fields&hasAttempt != 0 {
		m.AttemptStart = int64(d.nonZero(d.fixed64()))
	}
	m.Takeovers = 0
	if fields&hasTakeovers != 0 {
		m.Takeovers = d.nonZero(d.uvarint())
	}
	switch {
	case d.err != nil:
		return d.err
	case len(d.b) != 0:
		return fmt.Errorf("%d bytes after the mark's fields", len(d.b))
	case version == markVersionV3 && !m.needsV3():
		return errNotCanonical
	}
	return nil
}

// setState sets the decoded state, refusing one past highest (PARKED is
// only in record version 3).
func (m *Mark) setState(s uint64, highest State) error {
	m.State = State(s)
	if s < uint64(InProgress) || s > uint64(highest) {
		return fmt.Errorf("unknown mark state %d", s)
	}
	return nil
}

// fieldDecoder reads the optional fields of a mark, keeping the first
// error so the decoder reads as a list of fields.
type fieldDecoder struct {
	b   []byte
	err error
}

// uvarint reads a varint in its one (shortest) encoding.
func (d *fieldDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || n != uvarintLen(v) {
		d.err = errVarint
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes reads a length-prefixed field; the slice points into the record.
func (d *fieldDecoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errFieldSize
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// fixed64 reads 8 bytes, little-endian.
func (d *fieldDecoder) fixed64() uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.err = errFieldSize
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *fieldDecoder) nonEmpty(v []byte) []byte {
	if d.err == nil && len(v) == 0 {
		d.err = errEmptyOpt
	}
	return v
}

func (d *fieldDecoder) nonZero(v uint64) uint64 {
	if d.err == nil && v == 0 {
		d.err = errEmptyOpt
	}
	return v
}

func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

func zigzag(v int64) uint64 { return uint64(v<<1) ^ uint64(v>>63) }

func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// legacyFields is the length of the msgpack array of a format 1-2 mark.
const legacyFields = 7

// unmarshalLegacy decodes the msgpack mark that files before format 3
// hold: state, 32-byte hash, response, error, lease, token, first seen.
func (m *Mark) unmarshalLegacy(raw []byte) error {
	return envelope.Unseal(raw, legacyFields, func(dec *msgpack.Decoder) error {
		state, err := dec.DecodeUint8()
		if err != nil {
			return err
		}
		if err := m.setState(uint64(state), Failed); err != nil {
			return err
		}
		m.AttemptStart, m.Takeovers = 0, 0
		hash, err := dec.DecodeBytes()
		if err != nil {
			return err
		}
		if len(hash) != HashSize {
			return fmt.Errorf("payload hash is %d bytes, want %d", len(hash), HashSize)
		}
		// Compared by its first bytes, like a new mark's, so a retry
		// after the upgrade still matches the mark of its first delivery.
		m.PayloadHash = Fingerprint([HashSize]byte(hash))
		if m.Response, err = dec.DecodeBytes(); err != nil {
			return err
		}
		if m.Error, err = dec.DecodeString(); err != nil {
			return err
		}
		if m.LeaseUntil, err = dec.DecodeInt64(); err != nil {
			return err
		}
		if m.Token, err = dec.DecodeUint64(); err != nil {
			return err
		}
		m.FirstSeen, err = dec.DecodeInt64()
		return err
	})
}

// MarshalLegacy encodes the mark as files before format 3 hold it. This
// build never writes it: it is here so the tests can build such files and
// check that they still read.
func (m *Mark) MarshalLegacy() []byte {
	return envelope.Seal(func(enc *msgpack.Encoder) error {
		return errors.Join(
			enc.EncodeArrayLen(legacyFields),
			enc.EncodeUint8(uint8(m.State)),
			enc.EncodeBytes(m.PayloadHash[:]),
			enc.EncodeBytes(m.Response),
			enc.EncodeString(m.Error),
			enc.EncodeInt64(m.LeaseUntil),
			enc.EncodeUint64(m.Token),
			enc.EncodeInt64(m.FirstSeen),
		)
	})
}
