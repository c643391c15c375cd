package idemgrpc

import (
	"errors"
	"testing"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

func TestAnswerRoundTripsAndEveryCutIsDamaged(t *testing.T) {
	a := &answer{
		status:   &spb.Status{Code: 3, Message: "card declined"},
		header:   metadata.Pairs("location", "/p/1"),
		trailer:  metadata.Pairs("x-ledger", "42", "x-ledger", "43"),
		response: []byte("ignored with a status, kept as bytes"),
	}
	b, err := a.encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeAnswer(b)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(a.status, got.status) || got.header.Get("location")[0] != "/p/1" ||
		len(got.trailer.Get("x-ledger")) != 2 || string(got.response) != string(a.response) {
		t.Fatalf("decoded %+v, encoded %+v", got, a)
	}
	// Every prefix short of the metadata's end is damaged, never a panic.
	end := len(b) - len(a.response)
	for n := 0; n < end; n++ {
		if _, err := decodeAnswer(b[:n]); !errors.Is(err, ErrDamagedRecord) {
			t.Fatalf("a record cut at %d of %d bytes: %v, want ErrDamagedRecord", n, end, err)
		}
	}
	if _, err := decodeAnswer([]byte{9}); !errors.Is(err, ErrDamagedRecord) {
		t.Fatalf("an unknown version: %v", err)
	}
	huge := append([]byte{recordVersion, 0}, 0xff, 0xff, 0xff, 0xff, 0x0f) // a metadata count past the record
	if _, err := decodeAnswer(huge); !errors.Is(err, ErrDamagedRecord) {
		t.Fatalf("a metadata count past the record: %v", err)
	}
}

func FuzzDecodeAnswer(f *testing.F) {
	ok, _ := (&answer{header: metadata.Pairs("a", "b"), response: []byte("r")}).encode()
	f.Add(ok)
	f.Add([]byte{recordVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeAnswer(b)
		if err != nil {
			if !errors.Is(err, ErrDamagedRecord) {
				t.Fatalf("an error that is not ErrDamagedRecord: %v", err)
			}
			return
		}
		if _, err := a.encode(); err != nil {
			t.Fatalf("a decoded answer does not encode: %v", err)
		}
	})
}
