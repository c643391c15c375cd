// Package layout owns oncekv's on-disk layout inside the bbolt file: the
// system buckets that hold dedup marks and metadata, where the user buckets
// sit, and the versioned, checksummed codecs of every system record.
// Only oncekv calls it; users reach their data through package bucket.
//
// # Layout
//
// Every bucket sits at the root of the bbolt file, under one of two
// disjoint name prefixes:
//
//	oncekv.meta               format record (magic, format version, creation
//	                          time), windows record (the span) and expiry
//	                          record (the expiry floor)
//	oncekv.fences             per-resource fencing-token counters and per-key
//	                          fences (see internal/fencestore)
//	oncekv.filters            the Bloom filters of sealed windows, by window start
//	oncekv.closed             the newest window's Bloom filter as the last clean
//	                          Close left it, and the stamp that proves it current
//	oncekv.leases             the latest lease end of the claims of each window
//	oncekv.window/<8 bytes>   one bucket per time window, named by the window's
//	                          start as a sortable big-endian integer; inside, one
//	                          mark per (handler, key)
//	u/<name>                  the user bucket <name>
//
// The layout is flat because each level of bucket nesting is one more page
// written per commit.
//
// # Records
//
// A system record is a format-version byte, a body and a CRC-32C of both.
// The body is msgpack, except a mark's since format 3: a binary layout of
// its own (see mark.go), as marks are most of the file. Decoding checks all three and reports a *base.RecordError naming the
// bucket and key, so corruption inside a record is an error, never a panic
// and never a silently wrong value.
package layout

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/fencestore"
)

// Names at the root of the bbolt file. Every bucket lives at the root, under
// one of two disjoint prefixes: "oncekv." for the system, "u/" for user
// buckets. Nothing is nested, because in bbolt every level of nesting is one
// more page to write on each commit; keeping marks and user data one level
// deep saved two page writes of the eleven a unique Apply cost.
var (
	MetaRoot     = []byte("oncekv.meta")
	FencesRoot   = fencestore.Root
	FiltersRoot  = []byte("oncekv.filters")
	LeasesRoot   = []byte("oncekv.leases")
	WindowPrefix = []byte("oncekv.window/")
	UserPrefix   = base.UserPrefix
)

// systemRoots lists the root buckets Init creates and Check requires. The
// leases bucket is not one: it is created by the first claim that needs it.
var systemRoots = [][]byte{MetaRoot, FencesRoot, FiltersRoot}

// formatKey is the key of the format record inside MetaRoot.
var formatKey = []byte("format")

// MaxKeySize is the largest key bbolt stores. User keys and the encoded
// (handler, key) of a mark must fit in it.
const MaxKeySize = bolt.MaxKeySize

// markKeyOverhead is the length prefix in front of the handler in a mark key.
const markKeyOverhead = 2

// MaxMarkKeySize is the largest len(handler)+len(key) a mark accepts.
const MaxMarkKeySize = MaxKeySize - markKeyOverhead

// ErrNotOncekv reports a bbolt file that was not created by oncekv.
var ErrNotOncekv = errors.New("oncekv: not an oncekv database")

// MarkKey encodes the dedup scope (handler, key) as one bbolt key: a 2-byte
// big-endian handler length, the handler, then the key. The length prefix
// keeps ("ab","c") and ("a","bc") apart without forbidding any byte in either.
// The caller checks the sizes first (see [CheckMarkKey]).
func MarkKey(handler, key string) []byte {
	return AppendMarkKey(make([]byte, 0, markKeyOverhead+len(handler)+len(key)), handler, key)
}

// AppendMarkKey is [MarkKey] appending to dst, for a caller that has room
// for a short key on its stack.
func AppendMarkKey(dst []byte, handler, key string) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(handler)))
	return append(append(dst, handler...), key...)
}

// SplitMarkKey is the inverse of [MarkKey]. It reports false for bytes that
// are not a well-formed mark key.
func SplitMarkKey(b []byte) (handler, key string, ok bool) {
	if len(b) < markKeyOverhead {
		return "", "", false
	}
	n := int(binary.BigEndian.Uint16(b))
	if n > len(b)-markKeyOverhead {
		return "", "", false
	}
	return string(b[markKeyOverhead : markKeyOverhead+n]), string(b[markKeyOverhead+n:]), true
}

// CheckMarkKey reports whether (handler, key) fits in one bbolt key.
func CheckMarkKey(handler, key string) error {
	if n := len(handler) + len(key); n > MaxMarkKeySize {
		return fmt.Errorf("handler and key are %d bytes together, over the limit of %d: %w",
			n, MaxMarkKeySize, base.ErrKeyTooLarge)
	}
	if len(handler) > math.MaxUint16 {
		return fmt.Errorf("handler is %d bytes: %w", len(handler), base.ErrKeyTooLarge)
	}
	return nil
}

// WindowName is the root bucket name of the window starting at
// startUnixNano: WindowPrefix, then the start big-endian with the sign bit
// flipped, so that bbolt's byte order is time order even before 1970.
func WindowName(startUnixNano int64) []byte {
	b := make([]byte, len(WindowPrefix)+8)
	n := copy(b, WindowPrefix)
	binary.BigEndian.PutUint64(b[n:], uint64(startUnixNano)^(1<<63))
	return b
}

// ParseWindowName is the inverse of [WindowName].
func ParseWindowName(b []byte) (startUnixNano int64, ok bool) {
	if len(b) != len(WindowPrefix)+8 || !bytes.HasPrefix(b, WindowPrefix) {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b[len(WindowPrefix):]) ^ (1 << 63)), true
}

// Init prepares a bbolt file for oncekv inside a writable transaction. A file
// with no buckets at all is new: Init creates the system buckets and writes
// the format record. A file that already has them is checked. Anything else
// (another program's bbolt file, a file missing a system bucket) is
// ErrNotOncekv or a corruption error, and nothing is written.
//
// span is the window span, in nanoseconds, that a new file's windows are
// made with; it is stored with the format record (see [ReadSpan]).
func Init(tx *bolt.Tx, createdUnixNano, span int64) (created bool, err error) {
	if tx.Bucket(MetaRoot) == nil {
		if err := checkEmpty(tx); err != nil {
			return false, err
		}
		if !tx.Writable() {
			return true, nil
		}
		for _, name := range systemRoots {
			if _, err := tx.CreateBucket(name); err != nil {
				return false, fmt.Errorf("oncekv: create system bucket %q: %w", name, err)
			}
		}
		rec := Format{Magic: FormatMagic, Version: FormatVersion, CreatedUnixNano: createdUnixNano}
		if err := tx.Bucket(MetaRoot).Put(formatKey, rec.Marshal()); err != nil {
			return false, fmt.Errorf("oncekv: write format record: %w", err)
		}
		if err := tx.Bucket(MetaRoot).Put(windowsKey, Windows{Span: span}.Marshal()); err != nil {
			return false, fmt.Errorf("oncekv: write windows record: %w", err)
		}
		return true, nil
	}
	return false, Check(tx)
}

// Check verifies that an existing file is an oncekv file of a format this
// code reads, holding every system bucket its format version promises:
// version 2 files have all of systemRoots from their creation; version 1
// files may lack FiltersRoot, which [Upgrade] creates.
func Check(tx *bolt.Tx) error {
	meta := tx.Bucket(MetaRoot)
	if meta == nil {
		return ErrNotOncekv
	}
	raw := meta.Get(formatKey)
	if raw == nil {
		return fmt.Errorf("%w: %s has no format record", ErrNotOncekv, MetaRoot)
	}
	var f Format
	if err := f.Unmarshal(raw); err != nil {
		return &base.RecordError{Bucket: string(MetaRoot), Key: string(formatKey), Err: err}
	}
	if f.Magic != FormatMagic {
		return fmt.Errorf("%w: format magic is %q", ErrNotOncekv, f.Magic)
	}
	if f.Version > FormatVersion {
		return fmt.Errorf("%w: file format %d, this build reads up to %d", base.ErrFormatVersion, f.Version, FormatVersion)
	}
	for _, name := range systemRoots {
		if tx.Bucket(name) == nil && (f.Version > legacyFormat || !bytes.Equal(name, FiltersRoot)) {
			return fmt.Errorf("%w: system bucket %q is missing", base.ErrCorrupt, name)
		}
	}
	return nil
}

func checkEmpty(tx *bolt.Tx) error {
	var first []byte
	_ = tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
		first = append([]byte(nil), name...)
		return errStop
	})
	if first != nil {
		return fmt.Errorf("%w: it holds bucket %q and no %s", ErrNotOncekv, first, MetaRoot)
	}
	return nil
}

// errStop ends a ForEach early; it never escapes this package.
var errStop = errors.New("stop")

// ForEachUserBucket calls fn with the name of every user bucket, in order.
func ForEachUserBucket(tx *bolt.Tx, fn func(name []byte) error) error {
	c := tx.Cursor()
	for k, v := c.Seek(UserPrefix); k != nil && bytes.HasPrefix(k, UserPrefix); k, v = c.Next() {
		if v != nil {
			continue // the root holds only buckets
		}
		if err := fn(k[len(UserPrefix):]); err != nil {
			return err
		}
	}
	return nil
}
