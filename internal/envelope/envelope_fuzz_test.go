package envelope_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/oncekv/oncekv/internal/envelope"
)

// FuzzUnseal feeds arbitrary bytes to the envelope every system record
// shares: it never panics, and a record it accepts (version, checksum,
// field count, no trailing bytes) seals back to the same bytes.
func FuzzUnseal(f *testing.F) {
	seal := func(vals ...any) []byte {
		return envelope.Seal(func(enc *msgpack.Encoder) error {
			errs := []error{enc.EncodeArrayLen(len(vals))}
			for _, v := range vals {
				errs = append(errs, enc.Encode(v))
			}
			return errors.Join(errs...)
		})
	}
	f.Add(seal("a", []byte{1, 2}))
	f.Add(seal("", []byte(nil)))
	f.Add(seal("abc", []byte{}))
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var s string
		var b []byte
		err := envelope.Unseal(raw, 2, func(dec *msgpack.Decoder) (err error) {
			if s, err = dec.DecodeString(); err != nil {
				return err
			}
			b, err = dec.DecodeBytes()
			return err
		})
		if err != nil {
			return
		}
		again := envelope.Seal(func(enc *msgpack.Encoder) error {
			return errors.Join(enc.EncodeArrayLen(2), enc.EncodeString(s), enc.EncodeBytes(b))
		})
		// msgpack has several encodings of a short string or bytes; what
		// must hold is that the re-sealed record decodes to the same values.
		var s2 string
		var b2 []byte
		require.NoError(t, envelope.Unseal(again, 2, func(dec *msgpack.Decoder) (err error) {
			if s2, err = dec.DecodeString(); err != nil {
				return err
			}
			b2, err = dec.DecodeBytes()
			return err
		}))
		require.Equal(t, s, s2)
		require.Equal(t, b, b2)
	})
}
