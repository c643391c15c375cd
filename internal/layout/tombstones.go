package layout

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/envelope"
)

// Tombstones are what a window's final marks leave once they are past
// Retention: enough to say that a key was applied (or failed), and about
// when it was first seen, and nothing else (docs/design/tombstones.md).
//
// Each window's tombstones are a root bucket of their own,
// TombPrefix/<8 bytes> like the window's, holding chunks: the key of a
// chunk is the mark key of its first tombstone, and a chunk holds the
// tombstones of the keys from it to the next chunk's key, in key order, as
// TombEntrySize-byte entries:
//
//	hash   TombHashSize bytes: the first bytes of the SHA-256 of the mark
//	       key (TombHash)
//	info   3 bytes, little-endian: bit 0 set for a FAILED mark; bits 1-23
//	       the mark's FirstSeen less the window's start, in whole minutes,
//	       signed (clamped to ±(2^22-1) minutes, about 8 years)
//
// A chunk's value is a record: version byte, the entries, CRC-32C. Chunks
// are sized so that two fill a page, and the bucket is written in key
// order at bbolt's fill 1.0: about 20.5 bytes a tombstone on 4 KiB pages.
// The bucket's sequence counts its tombstones. A look-up seeks the chunk
// whose range holds the key (one B-tree descent), checks the chunk's
// checksum and scans its entries for the key's hash.
var TombPrefix = []byte("oncekv.tomb/")

// TombHashSize is the bytes of a key's SHA-256 a tombstone keeps: two keys
// share it with a chance of 2^-128 per pair.
const TombHashSize = 16

// TombEntrySize is the bytes of one tombstone in its chunk.
const TombEntrySize = TombHashSize + 3

// tombVersion is the record version of a chunk.
const tombVersion = 1

// tombOffsetLimit clamps a tombstone's first-seen offset, in minutes, to
// what 23 signed bits hold.
const tombOffsetLimit = 1<<22 - 1

// TombHash is the hash of mkey a tombstone keeps.
func TombHash(mkey []byte) [TombHashSize]byte {
	sum := sha256.Sum256(mkey)
	return [TombHashSize]byte(sum[:TombHashSize])
}

// TombName is the root bucket name of the tombstones of the window
// starting at start; it sorts as WindowName does.
func TombName(start int64) []byte {
	b := make([]byte, len(TombPrefix)+8)
	n := copy(b, TombPrefix)
	binary.BigEndian.PutUint64(b[n:], uint64(start)^(1<<63))
	return b
}

// ParseTombName is the inverse of [TombName].
func ParseTombName(b []byte) (start int64, ok bool) {
	if len(b) != len(TombPrefix)+8 || !bytes.HasPrefix(b, TombPrefix) {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b[len(TombPrefix):]) ^ (1 << 63)), true
}

// ForEachTombWindow calls fn with every window that has tombstones, oldest
// first, and its bucket, until fn returns an error.
func ForEachTombWindow(tx *bolt.Tx, fn func(start int64, b *bolt.Bucket) error) error {
	c := tx.Cursor()
	for name, v := c.Seek(TombPrefix); name != nil && bytes.HasPrefix(name, TombPrefix); name, v = c.Next() {
		start, ok := ParseTombName(name)
		if !ok || v != nil {
			return fmt.Errorf("%w: stray root entry %q among the tombstones", base.ErrCorrupt, name)
		}
		if err := fn(start, tx.Bucket(name)); err != nil {
			return err
		}
	}
	return nil
}

// TombCount returns the number of tombstones in a tombstone bucket.
func TombCount(b *bolt.Bucket) uint64 { return b.Sequence() }

// appendTomb appends the tombstone of m, a final mark of mkey in the
// window starting at start, to entries.
func appendTomb(entries []byte, start int64, mkey []byte, m *Mark) []byte {
	h := TombHash(mkey)
	off := (m.FirstSeen - start) / int64(time.Minute)
	off = max(min(off, tombOffsetLimit), -tombOffsetLimit)
	info := uint32(int32(off)) << 1
	if m.State == Failed {
		info |= 1
	}
	return append(append(entries, h[:]...), byte(info), byte(info>>8), byte(info>>16))
}

// chunkEntries is how many tombstones a chunk keyed by a key of keyLen
// bytes holds on pages of pageSize bytes: two such chunks fill a page
// (bbolt's leaf header is 16 bytes, each element's 16).
func chunkEntries(pageSize, keyLen int) int {
	room := (pageSize-16)/2 - 16 - keyLen - 1 - 4
	return max(room/TombEntrySize, 8)
}

// TombWriter writes a window's tombstones, in mark key order, into chunks.
type TombWriter struct {
	tx      *bolt.Tx
	start   int64
	b       *bolt.Bucket
	first   []byte // the key of the chunk being filled
	entries []byte
	limit   int
	written int
}

// NewTombWriter returns a writer of the tombstones of the window starting
// at start, creating its bucket. Every key it is given must sort after
// those of the chunks already in it.
func NewTombWriter(tx *bolt.Tx, start int64) (*TombWriter, error) {
	b, err := tx.CreateBucketIfNotExists(TombName(start))
	if err != nil {
		return nil, base.MapBoltErr(err)
	}
	return &TombWriter{tx: tx, start: start, b: b}, nil
}

// Add adds the tombstone of m, the final mark of mkey.
func (t *TombWriter) Add(mkey []byte, m *Mark) error {
	if t.first == nil {
		t.first = bytes.Clone(mkey)
		t.limit = chunkEntries(t.tx.DB().Info().PageSize, len(mkey))
	}
	t.entries = appendTomb(t.entries, t.start, mkey, m)
	if len(t.entries) == t.limit*TombEntrySize {
		return t.Flush()
	}
	return nil
}

// Flush writes the chunk being filled, if any.
func (t *TombWriter) Flush() error {
	if t.first == nil {
		return nil
	}
	n := len(t.entries) / TombEntrySize
	out := envelope.Alloc(tombVersion, len(t.entries))
	copy(envelope.Body(out), t.entries)
	envelope.Finish(out)
	// The bucket only ever grows at its end here: packed pages.
	t.b.FillPercent = base.AppendFill
	if err := t.b.Put(t.first, out); err != nil {
		return base.MapBoltErr(err)
	}
	if err := t.b.SetSequence(t.b.Sequence() + uint64(n)); err != nil {
		return base.MapBoltErr(err)
	}
	t.written += n
	t.first, t.entries = nil, t.entries[:0]
	return nil
}

// Written returns the number of tombstones flushed.
func (t *TombWriter) Written() int { return t.written }

// TombChunkEntries checks the record of a chunk, as a tombstone bucket
// holds it, and returns how many tombstones it holds.
func TombChunkEntries(raw []byte) (int, error) {
	entries, err := openChunk(raw)
	return len(entries) / TombEntrySize, err
}

// openChunk checks a chunk's record and returns its entries.
func openChunk(raw []byte) ([]byte, error) {
	version, body, err := envelope.Open(raw)
	switch {
	case err != nil:
		return nil, err
	case version != tombVersion:
		return nil, fmt.Errorf("tombstone chunk version %d, this build reads %d", version, tombVersion)
	case len(body) == 0 || len(body)%TombEntrySize != 0:
		return nil, fmt.Errorf("tombstone chunk of %d bytes is not a whole number of %d-byte entries", len(body), TombEntrySize)
	}
	return body, nil
}

// seekChunk returns the key and value of the chunk whose range holds mkey
// in b, or nil.
func seekChunk(b *bolt.Bucket, mkey []byte) (k, v []byte) {
	c := b.Cursor()
	k, v = c.Seek(mkey)
	if k == nil || !bytes.Equal(k, mkey) {
		k, v = c.Prev()
	}
	return k, v
}

// indexOf returns the index of the entry of hash h in entries, or -1.
func indexOf(entries []byte, h *[TombHashSize]byte) int {
	for i := 0; i+TombEntrySize <= len(entries); i += TombEntrySize {
		if [TombHashSize]byte(entries[i:i+TombHashSize]) == *h {
			return i / TombEntrySize
		}
	}
	return -1
}

// tombEntry finds the entry of mkey (hash h) in the tombstone bucket of
// the window starting at start: its chunk's bucket, key and entries, and
// its index there, -1 when there is none.
func tombEntry(tx *bolt.Tx, start int64, mkey []byte, h *[TombHashSize]byte) (b *bolt.Bucket, k, entries []byte, i int, err error) {
	if b = tx.Bucket(TombName(start)); b == nil {
		return nil, nil, nil, -1, nil
	}
	k, v := seekChunk(b, mkey)
	if k == nil {
		return b, nil, nil, -1, nil
	}
	if entries, err = openChunk(v); err != nil {
		return b, k, nil, -1, tombError(start, k, err)
	}
	return b, k, entries, indexOf(entries, h), nil
}

// FindTomb returns the tombstone of mkey, whose TombHash is h, in the
// window starting at start, as a FoundMark: State, FirstSeen (to the
// minute) and Window, Tombstone set; nil when there is none.
func FindTomb(tx *bolt.Tx, start int64, mkey []byte, h *[TombHashSize]byte) (*FoundMark, error) {
	_, _, entries, i, err := tombEntry(tx, start, mkey, h)
	if i < 0 || err != nil {
		return nil, err
	}
	return decodeTomb(entries[i*TombEntrySize:], start), nil
}

// decodeTomb decodes the entry at the start of e, of the window starting
// at start.
func decodeTomb(e []byte, start int64) *FoundMark {
	i := e[TombHashSize:]
	info := uint32(i[0]) | uint32(i[1])<<8 | uint32(i[2])<<16
	m := &FoundMark{Window: start, Tombstone: true}
	// Shifted to the top and back, for the sign of the 23-bit offset.
	m.State, m.FirstSeen = Done, start+int64(int32(info<<8)>>9)*int64(time.Minute)
	if info&1 != 0 {
		m.State = Failed
	}
	return m
}

// DeleteTomb removes the tombstone of mkey (hash h) from the window
// starting at start, and reports whether there was one. A chunk left empty
// is deleted; a chunk's key stays the lower bound of its range.
func DeleteTomb(tx *bolt.Tx, start int64, mkey []byte, h *[TombHashSize]byte) (bool, error) {
	b, k, entries, i, err := tombEntry(tx, start, mkey, h)
	if i < 0 || err != nil {
		return false, err
	}
	k = bytes.Clone(k)
	rest := append(bytes.Clone(entries[:i*TombEntrySize]), entries[(i+1)*TombEntrySize:]...)
	if err := b.SetSequence(b.Sequence() - 1); err != nil {
		return false, base.MapBoltErr(err)
	}
	if len(rest) == 0 {
		return true, base.MapBoltErr(b.Delete(k))
	}
	out := envelope.Alloc(tombVersion, len(rest))
	copy(envelope.Body(out), rest)
	envelope.Finish(out)
	return true, base.MapBoltErr(b.Put(k, out))
}

// TombstoneSome turns up to max marks of the window starting at start,
// from its first key on, into tombstones, and deletes them: tomb says of
// each decoded mark whether it leaves a tombstone (a final mark) or none
// (a claim that recorded no outcome), or fails the step; a mark that does
// not decode leaves none. It returns the tombstones written and the marks
// deleted. Once the window is empty, its bucket and lease end go; its
// persisted filter stays, for its tombstones (or goes, when it has none). Steps of one window must follow each other: each writes
// after the chunks of the last.
func TombstoneSome(tx *bolt.Tx, start int64, max int, tomb func(mkey []byte, m *Mark) (bool, error)) (tombs, deleted int, gone bool, err error) {
	name := WindowName(start)
	w := tx.Bucket(name)
	if w != nil {
		tw, err := NewTombWriter(tx, start)
		if err != nil {
			return 0, 0, false, err
		}
		keys := make([][]byte, 0, min(max, 4096))
		c := w.Cursor()
		for k, v := c.First(); k != nil && len(keys) < max; k, v = c.Next() {
			var m Mark
			keep := false
			if m.Unmarshal(v) == nil {
				if keep, err = tomb(k, &m); err != nil {
					return 0, 0, false, err
				}
			}
			if keep {
				if err := tw.Add(k, &m); err != nil {
					return 0, 0, false, err
				}
			}
			keys = append(keys, bytes.Clone(k))
		}
		if err := tw.Flush(); err != nil {
			return 0, 0, false, err
		}
		if tw.Written() == 0 && TombCount(tw.b) == 0 {
			// Nothing to keep (yet): no empty tombstone bucket is left.
			if err := tx.DeleteBucket(TombName(start)); err != nil {
				return 0, 0, false, base.MapBoltErr(err)
			}
		}
		for _, k := range keys {
			if err := w.Delete(k); err != nil {
				return 0, 0, false, base.MapBoltErr(err)
			}
		}
		tombs, deleted = tw.Written(), len(keys)
		if k, _ := w.Cursor().First(); k != nil {
			if err := w.SetSequence(w.Sequence() - min(uint64(len(keys)), w.Sequence())); err != nil {
				return 0, 0, false, base.MapBoltErr(err)
			}
			return tombs, deleted, false, nil
		}
		if err := tx.DeleteBucket(name); err != nil {
			return 0, 0, false, base.MapBoltErr(err)
		}
	}
	if tx.Bucket(TombName(start)) == nil {
		// No tombstone at all: the window's filter has nothing to answer for.
		if err := DeleteFilter(tx, start); err != nil {
			return 0, 0, false, err
		}
	}
	return tombs, deleted, true, deleteLeaseEnd(tx, start)
}

// DropTombs deletes the tombstones of the window starting at start, with
// the window's persisted filter, in one transaction.
func DropTombs(tx *bolt.Tx, start int64) error {
	if tx.Bucket(TombName(start)) != nil {
		if err := tx.DeleteBucket(TombName(start)); err != nil {
			return base.MapBoltErr(err)
		}
	}
	return DeleteFilter(tx, start)
}

// ForEachTomb calls fn with the hash and the decoded tombstone of every
// entry of the window starting at start, in chunk order, and reports each
// chunk that does not decode to bad (and goes on), for DB.Check and the
// tests.
func ForEachTomb(b *bolt.Bucket, start int64, fn func(h [TombHashSize]byte, m *FoundMark) error, bad func(error) error) error {
	var prev []byte
	return b.ForEach(func(k, v []byte) error {
		entries, err := openChunk(v)
		switch {
		case v == nil:
			err = errors.New("a nested bucket among the chunks")
		case err == nil && prev != nil && bytes.Compare(prev, k) >= 0:
			err = errors.New("chunk keys out of order")
		case err == nil:
			if _, _, ok := SplitMarkKey(k); !ok {
				err = errors.New("a chunk's key is not a mark key")
			}
		}
		prev = k
		if err != nil {
			return bad(tombError(start, k, err))
		}
		for i := 0; i < len(entries); i += TombEntrySize {
			if err := fn([TombHashSize]byte(entries[i:i+TombHashSize]), decodeTomb(entries[i:], start)); err != nil {
				return err
			}
		}
		return nil
	})
}

func tombError(start int64, chunk []byte, err error) error {
	name := fmt.Sprintf("%s%s", TombPrefix, time.Unix(0, start).UTC().Format(time.RFC3339))
	key := fmt.Sprintf("%x", chunk)
	if h, k, ok := SplitMarkKey(chunk); ok {
		key = h + "/" + k
	}
	return &base.RecordError{Bucket: name, Key: key, Err: err}
}
