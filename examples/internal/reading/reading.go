// Package reading is the message both broker examples carry: a sensor
// reading whose idempotency key travels in the payload, and the effect that
// stores it and counts how many times it was applied, so a test can prove
// each key was applied exactly once.
package reading

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/oncekv/oncekv"
)

// Reading is one sensor reading. Key is its idempotency key, created once
// by the sensor: brokers' own ids (MQTT's packet id, reused per session;
// JetStream's sequence, new for every publish) cannot deduplicate what a
// producer sent twice.
type Reading struct {
	Key   string  `json:"key"`
	Value float64 `json:"value"`
	// Poison makes the effect fail permanently: a message that no retry
	// can fix, to show it is terminated rather than redelivered forever.
	Poison bool `json:"poison,omitempty"`
}

var (
	// ErrBadPayload is returned by Decode for a payload that is not a
	// reading; it is permanent, since redelivering the bytes cannot help.
	ErrBadPayload = errors.New("oncekv: reading: bad payload")
	// ErrPoison is the permanent failure of a reading marked Poison.
	ErrPoison = errors.New("oncekv: reading: poison reading")
)

// Bucket holds the readings, Counts how many times each was applied.
var (
	Bucket = []byte("readings")
	Counts = []byte("applied")
)

// Encode returns r's payload.
func Encode(r Reading) []byte {
	b, err := json.Marshal(r)
	if err != nil { // a struct of a string, a float and a bool always marshals
		panic(err)
	}
	return b
}

// Decode parses a payload. A payload without a key is ErrBadPayload,
// wrapped permanent (oncekv.Permanent).
func Decode(payload []byte) (Reading, error) {
	var r Reading
	if err := json.Unmarshal(payload, &r); err != nil {
		return r, oncekv.Permanent(fmt.Errorf("%w: %w", ErrBadPayload, err))
	}
	if r.Key == "" {
		return r, oncekv.Permanent(fmt.Errorf("%w: no key", ErrBadPayload))
	}
	return r, nil
}

// Request is the store request of a delivery of r: the handler, r's key,
// and the payload whose hash tells a duplicate from a reused key.
func Request(handler string, payload []byte, r Reading) oncekv.Request {
	return oncekv.Request{Handler: handler, Key: r.Key, Payload: payload}
}

// Store is the effect: it writes the reading under its key and adds one to
// the key's count. The count is there for the tests: Apply commits it with
// the mark, so a count above 1 would be a double application. A poison
// reading fails permanently and writes nothing.
func Store(tx *oncekv.Tx, payload []byte, r Reading) error {
	if r.Poison {
		return oncekv.Permanent(fmt.Errorf("%w: %s", ErrPoison, r.Key))
	}
	b, err := tx.CreateBucketIfNotExists(Bucket)
	if err != nil {
		return err
	}
	if err := b.Put([]byte(r.Key), payload); err != nil {
		return err
	}
	c, err := tx.CreateBucketIfNotExists(Counts)
	if err != nil {
		return err
	}
	var n uint64
	if v := c.Get([]byte(r.Key)); len(v) == 8 {
		n = binary.BigEndian.Uint64(v)
	}
	return c.Put([]byte(r.Key), binary.BigEndian.AppendUint64(nil, n+1))
}

// Applied returns how many times each key was applied, read from db.
func Applied(db *oncekv.DB) (map[string]uint64, error) {
	out := make(map[string]uint64)
	err := db.View(func(tx *oncekv.Tx) error {
		c := tx.Bucket(Counts)
		if c == nil {
			return nil
		}
		return c.ForEach(func(k, v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("oncekv: reading: count of %q is %d bytes, want 8", k, len(v))
			}
			out[string(k)] = binary.BigEndian.Uint64(v)
			return nil
		})
	})
	return out, err
}
