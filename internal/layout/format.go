package layout

import (
	"errors"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/oncekv/oncekv/internal/envelope"
)

// FormatMagic and FormatVersion identify an oncekv file. FormatVersion is
// bumped whenever a record or the layout changes in a way older code cannot
// read.
const (
	FormatMagic = "oncekv"
	// FormatVersion history: 2, the windows record (the span), the filters
	// bucket always present, the leases bucket; 3, marks in the binary
	// record of mark.go with a 16-byte fingerprint (older marks still
	// decode and are rewritten only when their key is written again); 4,
	// marks of record version 3 (PARKED, a takeover's attempt), the parked
	// keys' bucket, tombstones, the advisor's record and the ghost filters
	// (files of format 3 read as they are).
	FormatVersion = 4
)

// Format is the record that marks a bbolt file as an oncekv file.
type Format struct {
	Magic           string
	Version         uint32
	CreatedUnixNano int64
}

// Marshal encodes the record.
func (f Format) Marshal() []byte {
	return envelope.Seal(func(enc *msgpack.Encoder) error {
		return errors.Join(
			enc.EncodeArrayLen(3),
			enc.EncodeString(f.Magic),
			enc.EncodeUint32(f.Version),
			enc.EncodeInt64(f.CreatedUnixNano),
		)
	})
}

// Unmarshal decodes and validates the record.
func (f *Format) Unmarshal(raw []byte) error {
	return envelope.Unseal(raw, 3, func(dec *msgpack.Decoder) (err error) {
		if f.Magic, err = dec.DecodeString(); err != nil {
			return err
		}
		if f.Version, err = dec.DecodeUint32(); err != nil {
			return err
		}
		f.CreatedUnixNano, err = dec.DecodeInt64()
		return err
	})
}
