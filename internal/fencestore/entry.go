package fencestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// A user bucket created by this build keeps each key's fence and version
// in front of its value, in the user bucket itself, instead of in a
// records bucket under the fences bucket: a fenced write then reads and
// writes one B-tree, not two (BenchmarkFenceLayout). Such a bucket says so
// in its sequence (see package bucket); buckets created before keep the
// records bucket, which Keys reads and writes.
//
// An entry of such a bucket is one of:
//
//	0x00 value                                  a key without a record
//	0x5a fence version crc value                a key with a record
//	0xa5 fence version crc                      a deleted key's record (a tombstone)
//
// fence and version are big-endian uint64s, crc the CRC-32C of the tag and
// both, little-endian. Any two tags differ in at least four bits, so no
// single flipped bit turns one kind into another; a flipped bit inside a
// record fails its checksum.
const (
	tagPlain = 0x00
	tagLive  = 0x5a
	tagGone  = 0xa5
	// EntryHeaderSize is the size of the longest header, what a value in
	// such a bucket gives up of bbolt's value limit.
	EntryHeaderSize = 1 + 8 + 8 + checksumSize
)

// Entry is a decoded entry of a user bucket that keeps fences in front of
// values.
type Entry struct {
	// Value is the user's value, nil for a tombstone. It points into raw.
	Value []byte
	// Record is the key's fence and version, when HasRecord.
	Record    Record
	HasRecord bool
}

// Exists reports whether the entry holds a value, not a tombstone.
func (e Entry) Exists() bool { return e.Value != nil }

// AppendPlain appends the entry of a key without a record.
func AppendPlain(dst, value []byte) []byte {
	dst = append(dst, tagPlain)
	return append(dst, value...)
}

// AppendLive appends the entry of a key with record r and value.
func AppendLive(dst []byte, r Record, value []byte) []byte {
	return append(appendEntryRecord(dst, tagLive, r), value...)
}

// AppendGone appends the tombstone of a deleted key with record r: the key
// keeps its fence and version when its value goes, so a stale writer cannot
// bring it back.
func AppendGone(dst []byte, r Record) []byte { return appendEntryRecord(dst, tagGone, r) }

func appendEntryRecord(dst []byte, tag byte, r Record) []byte {
	start := len(dst)
	dst = append(dst, tag)
	dst = binary.BigEndian.AppendUint64(dst, r.Fence)
	dst = binary.BigEndian.AppendUint64(dst, r.Version)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// ParseEntry decodes a stored entry. It never reads past raw, and an entry
// that is not one of the three kinds is an error, never a value with a
// piece of header left in it.
func ParseEntry(raw []byte) (Entry, error) {
	if len(raw) == 0 {
		return Entry{}, errors.New("entry has no header")
	}
	switch raw[0] {
	case tagPlain:
		return Entry{Value: raw[1:len(raw):len(raw)]}, nil
	case tagLive, tagGone:
	default:
		return Entry{}, fmt.Errorf("entry header kind %#x is unknown", raw[0])
	}
	if len(raw) < EntryHeaderSize {
		return Entry{}, errors.New("entry shorter than its header")
	}
	n := EntryHeaderSize - checksumSize
	if crc32.Checksum(raw[:n], castagnoli) != binary.LittleEndian.Uint32(raw[n:EntryHeaderSize]) {
		return Entry{}, errors.New("entry header checksum mismatch")
	}
	e := Entry{HasRecord: true, Record: Record{Fence: binary.BigEndian.Uint64(raw[1:9]), Version: binary.BigEndian.Uint64(raw[9:17])}}
	if raw[0] == tagGone {
		if len(raw) != EntryHeaderSize {
			return Entry{}, fmt.Errorf("tombstone has %d bytes after its header", len(raw)-EntryHeaderSize)
		}
		return e, nil
	}
	e.Value = raw[EntryHeaderSize:len(raw):len(raw)]
	return e, nil
}
