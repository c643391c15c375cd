package fencestore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/fencestore"
)

// reencode writes e back the way the store writes entries.
func reencode(e fencestore.Entry) []byte {
	switch {
	case !e.HasRecord:
		return fencestore.AppendPlain(nil, e.Value)
	case e.Exists():
		return fencestore.AppendLive(nil, e.Record, e.Value)
	}
	return fencestore.AppendGone(nil, e.Record)
}

func TestEntry(t *testing.T) {
	r := fencestore.Record{Fence: 7, Version: 3}
	for _, tc := range []struct {
		name string
		raw  []byte
		want fencestore.Entry
	}{
		{"plain", fencestore.AppendPlain(nil, []byte("v")), fencestore.Entry{Value: []byte("v")}},
		{"plain empty", fencestore.AppendPlain(nil, nil), fencestore.Entry{Value: []byte{}}},
		{"live", fencestore.AppendLive(nil, r, []byte("v")), fencestore.Entry{Value: []byte("v"), Record: r, HasRecord: true}},
		{"live empty", fencestore.AppendLive(nil, r, nil), fencestore.Entry{Value: []byte{}, Record: r, HasRecord: true}},
		{"tombstone", fencestore.AppendGone(nil, r), fencestore.Entry{Record: r, HasRecord: true}},
	} {
		e, err := fencestore.ParseEntry(tc.raw)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, e, tc.name)
		require.Equal(t, tc.want.Value != nil, e.Exists(), tc.name, "an empty value exists; a tombstone does not")
		require.Equal(t, tc.raw, reencode(e), tc.name)
	}

	live := fencestore.AppendLive(nil, r, []byte("value"))
	for _, tc := range []struct {
		name string
		raw  []byte
		want string
	}{
		{"empty", nil, "no header"},
		{"unknown kind", append([]byte{0x5b}, live[1:]...), "unknown"},
		{"short", live[:fencestore.EntryHeaderSize-1], "shorter than its header"},
		{"flipped fence bit", flip(live, 4), "checksum mismatch"},
		{"flipped checksum bit", flip(live, fencestore.EntryHeaderSize-1), "checksum mismatch"},
		{"tombstone with a value", append(fencestore.AppendGone(nil, r), 'x'), "after its header"},
	} {
		_, err := fencestore.ParseEntry(tc.raw)
		require.ErrorContains(t, err, tc.want, tc.name)
	}
	// No single flipped bit turns one kind of header into another.
	for _, tag := range []byte{0x00, 0x5a, 0xa5} {
		for bit := range 8 {
			_, err := fencestore.ParseEntry(append([]byte{tag ^ 1<<bit}, live[1:]...))
			require.Error(t, err, "tag %#x bit %d", tag, bit)
		}
	}
}

// FuzzEntry: no input makes the entry decoder panic, and whatever it
// accepts encodes back to the same bytes, so an entry has one encoding.
func FuzzEntry(f *testing.F) {
	r := fencestore.Record{Fence: 7, Version: 3}
	f.Add(fencestore.AppendPlain(nil, []byte("v")))
	f.Add(fencestore.AppendLive(nil, r, []byte("v")))
	f.Add(fencestore.AppendGone(nil, r))
	f.Add([]byte{})
	f.Add([]byte{0x5a, 1, 2})
	f.Fuzz(func(t *testing.T, raw []byte) {
		e, err := fencestore.ParseEntry(raw)
		if err != nil {
			return
		}
		require.Equal(t, raw, reencode(e))
	})
}
