package dupcache_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/dupcache"
	"github.com/oncekv/oncekv/internal/layout"
)

func entry(h uint64, key, response string) *dupcache.Entry {
	return &dupcache.Entry{Hash: h, MKey: []byte(key), Found: layout.FoundMark{Mark: layout.Mark{State: layout.Done, Response: []byte(response)}}}
}

func TestGetFindsWhatWasPutUnderItsKeyOnly(t *testing.T) {
	var c dupcache.Cache
	c.Put(c.Epoch(), entry(7, "a", "ra"))
	require.Equal(t, "ra", string(c.Get(7, []byte("a")).Found.Response))
	require.Nil(t, c.Get(7, []byte("b")), "same hash, another key")
	require.Nil(t, c.Get(7+dupcache.Sets, []byte("a")), "same set, another hash")
}

// TestPinHidesAndUnpinDropsOlderReads: while a writer has a key pinned, its
// set answers nothing and takes nothing; after Unpin, only marks read at an
// epoch taken after the Unpin are answered.
func TestPinHidesAndUnpinDropsOlderReads(t *testing.T) {
	var c dupcache.Cache
	before := c.Epoch() // a reader's snapshot, older than the commit below
	c.Put(before, entry(1, "a", "old"))
	c.Pin(1)
	require.Nil(t, c.Get(1, []byte("a")))
	c.Put(before, entry(1, "a", "old")) // offered while pinned
	require.Nil(t, c.Get(1, []byte("a")))
	c.Unpin([]uint64{1})
	require.Nil(t, c.Get(1, []byte("a")), "read before the commit")
	c.Put(before, entry(1, "a", "old")) // offered late
	require.Nil(t, c.Get(1, []byte("a")), "read before the commit, offered after it")
	c.Put(c.Epoch(), entry(1, "a", "new"))
	require.Equal(t, "new", string(c.Get(1, []byte("a")).Found.Response))
	// Another set is untouched by the pin.
	c.Put(before, entry(2, "b", "b"))
	require.NotNil(t, c.Get(2, []byte("b")))
}

func TestFitsOnlySmallFinalMarks(t *testing.T) {
	small := &layout.Mark{State: layout.Done, Response: []byte("ok")}
	require.True(t, dupcache.Fits([]byte("k"), small, 0))
	require.False(t, dupcache.Fits([]byte("k"), small, dupcache.MaxEntryBytes))
	require.True(t, dupcache.Fits([]byte("k"), &layout.Mark{State: layout.Failed, Error: "no"}, 0))
	require.False(t, dupcache.Fits([]byte("k"), &layout.Mark{State: layout.InProgress}, 0))
	big := &layout.Mark{State: layout.Done, Response: make([]byte, dupcache.MaxEntryBytes)}
	require.False(t, dupcache.Fits([]byte("k"), big, 0))
}

// TestASetHoldsWaysEntries: a set keeps Ways keys; one more evicts one of
// them, never more.
func TestASetHoldsWaysEntries(t *testing.T) {
	var c dupcache.Cache
	for i := range dupcache.Ways + 1 {
		c.Put(c.Epoch(), entry(uint64(i)*dupcache.Sets, fmt.Sprint(i), "r"))
	}
	held := 0
	for i := range dupcache.Ways + 1 {
		if c.Get(uint64(i)*dupcache.Sets, []byte(fmt.Sprint(i))) != nil {
			held++
		}
	}
	require.Equal(t, dupcache.Ways, held)
}

func TestAddPayloadKeepsTheEntryValid(t *testing.T) {
	var c dupcache.Cache
	c.Put(c.Epoch(), entry(3, "k", "r"))
	c.AddPayload(c.Get(3, []byte("k")), []byte("payload"))
	e := c.Get(3, []byte("k"))
	require.True(t, e.HasPayload)
	require.Equal(t, "payload", string(e.Payload))
	c.Pin(3)
	c.Unpin([]uint64{3})
	require.Nil(t, c.Get(3, []byte("k")))
}
