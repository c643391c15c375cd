package layout

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/envelope"
)

// expiryKey holds the expiry record in MetaRoot.
var expiryKey = []byte("expiry")

// Expiry is the persisted state of window expiry and of the store's clock.
type Expiry struct {
	// Floor: every window starting before it has expired. Windows below
	// it that are still on disk are being deleted and are ignored.
	Floor int64
	// ClockHigh is the latest clock reading the store had made when the
	// record was written (Unix nanoseconds), so that a clock stepped back
	// across a restart cannot revive a lease that had expired.
	ClockHigh int64
}

// Marshal encodes the record.
func (e Expiry) Marshal() []byte { return sealInt64Pair(e.Floor, e.ClockHigh) }

// Unmarshal decodes and validates the record.
func (e *Expiry) Unmarshal(raw []byte) (err error) {
	e.Floor, e.ClockHigh, err = unsealInt64Pair(raw)
	return err
}

// sealInt64Pair encodes a record of two int64 fields.
func sealInt64Pair(a, b int64) []byte {
	return envelope.Seal(func(enc *msgpack.Encoder) error {
		return errors.Join(enc.EncodeArrayLen(2), enc.EncodeInt64(a), enc.EncodeInt64(b))
	})
}

// unsealInt64Pair decodes a record of two int64 fields.
func unsealInt64Pair(raw []byte) (a, b int64, err error) {
	err = envelope.Unseal(raw, 2, func(dec *msgpack.Decoder) (err error) {
		if a, err = dec.DecodeInt64(); err != nil {
			return err
		}
		b, err = dec.DecodeInt64()
		return err
	})
	return a, b, err
}

// ReadExpiry returns the expiry record; a store that never expired
// anything has the zero record with the lowest possible floor.
func ReadExpiry(tx *bolt.Tx) (Expiry, error) {
	e := Expiry{Floor: minInt64, ClockHigh: minInt64}
	meta := tx.Bucket(MetaRoot)
	if meta == nil {
		return e, fmt.Errorf("%w: system bucket %q is missing", base.ErrCorrupt, MetaRoot)
	}
	raw := meta.Get(expiryKey)
	if raw == nil {
		return e, nil
	}
	if err := e.Unmarshal(raw); err != nil {
		return e, &base.RecordError{Bucket: string(MetaRoot), Key: string(expiryKey), Err: err}
	}
	return e, nil
}

const minInt64 = -1 << 63

// windowsKey holds the windows record in MetaRoot.
var windowsKey = []byte("windows")

// legacyFormat is the format version of files written before the windows
// record existed: their window span is not stored.
const legacyFormat = 1

// Windows is the windows record: the span every window of the file was
// made with, in nanoseconds. Window ends are computed from it, so a store
// opened with another span would end windows early (or make them overlap)
// and drop marks before their retention.
type Windows struct{ Span int64 }

// Marshal encodes the record.
func (w Windows) Marshal() []byte { return sealInt64(w.Span) }

// Unmarshal decodes and validates the record.
func (w *Windows) Unmarshal(raw []byte) (err error) {
	if w.Span, err = unsealInt64(raw); err == nil && w.Span <= 0 {
		err = fmt.Errorf("window span %d is not positive", w.Span)
	}
	return err
}

// sealInt64 encodes a record of one int64 field.
func sealInt64(v int64) []byte {
	return envelope.Seal(func(enc *msgpack.Encoder) error {
		return errors.Join(enc.EncodeArrayLen(1), enc.EncodeInt64(v))
	})
}

// unsealInt64 decodes a record of one int64 field.
func unsealInt64(raw []byte) (v int64, err error) {
	err = envelope.Unseal(raw, 1, func(dec *msgpack.Decoder) (err error) {
		v, err = dec.DecodeInt64()
		return err
	})
	return v, err
}

// ReadSpan returns the window span the file's windows were made with, in
// nanoseconds. A file of the legacy format, written before the span was
// stored, reports legacy and a zero span: see [Upgrade].
func ReadSpan(tx *bolt.Tx) (span int64, legacy bool, err error) {
	meta := tx.Bucket(MetaRoot)
	if meta == nil {
		return 0, false, fmt.Errorf("%w: system bucket %q is missing", base.ErrCorrupt, MetaRoot)
	}
	f, err := readFormat(meta)
	if err != nil {
		return 0, false, err
	}
	raw := meta.Get(windowsKey)
	switch {
	case raw == nil && f.Version <= legacyFormat:
		return 0, true, nil
	case raw == nil:
		return 0, false, fmt.Errorf("%w: format %d file has no %q record in %s", base.ErrCorrupt, f.Version, windowsKey, MetaRoot)
	}
	var w Windows
	if err = w.Unmarshal(raw); err != nil {
		return 0, false, &base.RecordError{Bucket: string(MetaRoot), Key: string(windowsKey), Err: err}
	}
	return w.Span, false, nil
}

// Outdated reports whether the file's format is older than this build's:
// a writable open then runs [Upgrade], once.
func Outdated(tx *bolt.Tx) (bool, error) {
	meta := tx.Bucket(MetaRoot)
	if meta == nil {
		return false, fmt.Errorf("%w: system bucket %q is missing", base.ErrCorrupt, MetaRoot)
	}
	f, err := readFormat(meta)
	return f.Version < FormatVersion, err
}

func readFormat(meta *bolt.Bucket) (Format, error) {
	var f Format
	if err := f.Unmarshal(meta.Get(formatKey)); err != nil {
		return f, &base.RecordError{Bucket: string(MetaRoot), Key: string(formatKey), Err: err}
	}
	return f, nil
}

// Upgrade moves a file of an older format to the current one, so that
// older builds refuse it from then on: a version 1 file would have its
// stored span ignored by them, a version 2 file its marks of format 3
// misread, a version 3 file its parked keys and tombstones ignored. It records span as the file's window span (a version 2 file
// has it already: the same value is written back), creates the filters
// bucket if the file lacks it, and writes the new format version. Marks
// are not rewritten: old ones still decode, and new ones are written in
// the new form.
func Upgrade(tx *bolt.Tx, span int64) error {
	meta := tx.Bucket(MetaRoot)
	f, err := readFormat(meta)
	if err != nil {
		return err
	}
	if _, err := tx.CreateBucketIfNotExists(FiltersRoot); err != nil {
		return base.MapBoltErr(err)
	}
	f.Version = FormatVersion
	if err := meta.Put(windowsKey, Windows{Span: span}.Marshal()); err != nil {
		return base.MapBoltErr(err)
	}
	return base.MapBoltErr(meta.Put(formatKey, f.Marshal()))
}

// WriteExpiry stores the expiry record.
func WriteExpiry(tx *bolt.Tx, e Expiry) error {
	return base.MapBoltErr(tx.Bucket(MetaRoot).Put(expiryKey, e.Marshal()))
}

func filterKey(start int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(start)^(1<<63))
}

// filters returns the filters bucket. Every file a writable DB has open has
// one (Init creates it, Upgrade adds it to a version 1 file, Check
// requires it of a version 2 one), so its absence is corruption.
func filters(tx *bolt.Tx) (*bolt.Bucket, error) {
	if b := tx.Bucket(FiltersRoot); b != nil {
		return b, nil
	}
	return nil, fmt.Errorf("%w: system bucket %q is missing", base.ErrCorrupt, FiltersRoot)
}

// PutFilter stores the encoded filter of the window starting at start. The
// encoding carries its own checksum (see package bloom).
func PutFilter(tx *bolt.Tx, start int64, encoded []byte) error {
	b, err := filters(tx)
	if err != nil {
		return err
	}
	return base.MapBoltErr(b.Put(filterKey(start), encoded))
}

// GetFilter returns the stored filter of the window starting at start, or
// nil. The slice points into tx's memory, valid until tx ends: bloom.Decode
// keeps nothing of its input, so Open decodes a filter of megabytes
// without copying it first.
func GetFilter(tx *bolt.Tx, start int64) []byte {
	b := tx.Bucket(FiltersRoot)
	if b == nil {
		return nil
	}
	return b.Get(filterKey(start))
}

// DeleteFilter removes the stored filter of the window starting at start.
func DeleteFilter(tx *bolt.Tx, start int64) error {
	b, err := filters(tx)
	if err != nil {
		return err
	}
	return base.MapBoltErr(b.Delete(filterKey(start)))
}

// leases returns the lease-ends bucket, creating it in a writable
// transaction: files created before it existed lack it.
func leases(tx *bolt.Tx) (*bolt.Bucket, error) {
	if b := tx.Bucket(LeasesRoot); b != nil || !tx.Writable() {
		return b, nil
	}
	b, err := tx.CreateBucket(LeasesRoot)
	return b, base.MapBoltErr(err)
}

// LeaseEnd is the record of a window's latest lease end, Unix nanoseconds.
type LeaseEnd struct{ End int64 }

// Marshal encodes the record.
func (l LeaseEnd) Marshal() []byte { return sealInt64(l.End) }

// Unmarshal decodes and validates the record.
func (l *LeaseEnd) Unmarshal(raw []byte) (err error) {
	l.End, err = unsealInt64(raw)
	return err
}

// PutLeaseEnd records end (Unix nanoseconds) as the latest end of a lease
// of a claim in the window starting at start. Expiry keeps the window until
// then, so a live claim never loses its mark to expiry.
func PutLeaseEnd(tx *bolt.Tx, start, end int64) error {
	b, err := leases(tx)
	if err != nil {
		return err
	}
	return base.MapBoltErr(b.Put(filterKey(start), LeaseEnd{End: end}.Marshal()))
}

// ForEachLeaseEnd calls fn with every window's recorded latest lease end.
func ForEachLeaseEnd(tx *bolt.Tx, fn func(start, end int64) error) error {
	b := tx.Bucket(LeasesRoot)
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			return &base.RecordError{Bucket: string(LeasesRoot), Key: fmt.Sprintf("%x", k), Err: errors.New("key is not a window start")}
		}
		start := int64(binary.BigEndian.Uint64(k) ^ (1 << 63))
		var l LeaseEnd
		if err := l.Unmarshal(v); err != nil {
			return &base.RecordError{Bucket: string(LeasesRoot), Key: fmt.Sprint(start), Err: err}
		}
		return fn(start, l.End)
	})
}

// deleteLeaseEnd removes the lease end of the window starting at start.
func deleteLeaseEnd(tx *bolt.Tx, start int64) error {
	b := tx.Bucket(LeasesRoot)
	if b == nil {
		return nil
	}
	return base.MapBoltErr(b.Delete(filterKey(start)))
}
