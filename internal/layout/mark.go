package layout

import (
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/oncekv/oncekv/internal/record"
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
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// HashSize is the size of the SHA-256 payload hash stored in a mark.
const HashSize = 32

// Mark is the record of one (handler, key): everything a duplicate needs to
// be answered without running the effect again.
type Mark struct {
	State       State
	PayloadHash [HashSize]byte // SHA-256 of the first payload
	Response    []byte         // stored response; nil and empty stay distinct
	Error       string         // message of the permanent error of a Failed mark
	LeaseUntil  int64          // Unix nanoseconds; InProgress only
	Token       uint64         // fencing token of the claim that wrote it; 0 for Apply
	FirstSeen   int64          // Unix nanoseconds when the mark was first written
}

const markFields = 7

// Marshal encodes the mark.
func (m *Mark) Marshal() []byte {
	return record.Seal(func(enc *msgpack.Encoder) error {
		return errors.Join(
			enc.EncodeArrayLen(markFields),
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

// Unmarshal decodes and validates a mark. The decoded Response is a copy, so
// it stays valid after the transaction that read it.
func (m *Mark) Unmarshal(raw []byte) error {
	return record.Unseal(raw, markFields, func(dec *msgpack.Decoder) error {
		state, err := dec.DecodeUint8()
		if err != nil {
			return err
		}
		m.State = State(state)
		if m.State < InProgress || m.State > Failed {
			return fmt.Errorf("unknown mark state %d", state)
		}
		hash, err := dec.DecodeBytes()
		if err != nil {
			return err
		}
		if len(hash) != HashSize {
			return fmt.Errorf("payload hash is %d bytes, want %d", len(hash), HashSize)
		}
		copy(m.PayloadHash[:], hash)
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
