package idemhttp

import (
	"bytes"
	"testing"
)

// FuzzDecodeRecord feeds arbitrary bytes to the stored-record decoder, as a
// damaged or foreign record would: it returns an error or a record, never
// panics, and what it accepts encodes back to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	valid := make([]byte, recordPrefix)
	valid = append(valid, "hello"...)
	setPrefix(valid, 201, 5, false)
	valid = appendHeaders(valid, []header{{"Content-Type", "text/plain"}, {"Location", "/x"}})
	f.Add(valid)
	f.Add(valid[:recordPrefix])
	f.Add([]byte{})
	f.Add([]byte{recordVersion, flagBodyOmitted, 0, 200, 0, 0, 0, 0})
	f.Add([]byte{recordVersion, 0, 0, 200, 0xff, 0xff, 0xff, 0xff})
	overlong := make([]byte, recordPrefix)
	setPrefix(overlong, 200, 0, false)
	f.Add(append(overlong, 0x81, 0x00, 'A', 0x00)) // a header name length of 1 in two bytes
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeRecord(b)
		if err != nil {
			return
		}
		again := make([]byte, recordPrefix, recordPrefix+len(b))
		again = append(again, d.body...)
		setPrefix(again, d.status, len(d.body), d.omitted)
		again = appendHeaders(again, d.headers)
		if !bytes.Equal(again, b) {
			t.Fatalf("decoded %x, re-encoded %x", b, again)
		}
	})
}
