package layout

import (
	"errors"

	"github.com/vmihailenco/msgpack/v5"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/envelope"
)

// ClosedRoot holds what a clean Close leaves for the next Open: the Bloom
// filter of the newest window, which Open would otherwise rebuild by
// reading every key of that window, and the stamp that proves it current.
// It is created by the first Close that writes it. It is kept apart from
// FiltersRoot on purpose: a filter there is trusted without proof once its
// window is sealed, and this one is only as good as its stamp.
var ClosedRoot = []byte("oncekv.closed")

var (
	closedStampKey  = []byte("stamp")
	closedFilterKey = []byte("filter")
)

// FilterStamp says which state of the file a persisted newest-window filter
// describes. The filter is current only if the file is still in that
// state: the same newest window, and no commit since the one that wrote it.
type FilterStamp struct {
	// Window is the start of the window the filter is of.
	Window int64
	// TxID is the bbolt transaction that wrote the filter. bbolt numbers
	// every commit, so a file whose latest transaction is still TxID has
	// had no mark written or deleted since: this is the proof. A process
	// that reopened the store, wrote and was killed left a later one.
	TxID uint64
	// Marks and Root are the window bucket's mark count and root page when
	// the filter was written. TxID alone is the proof while the file keeps
	// its numbering. A tool that numbers transactions afresh (bbolt
	// compact) breaks it, and these do not mend it (a small window's root
	// is 0, its count may come back): a writable Open deletes any stamp it
	// finds stale (DropNewestFilter), before the file's numbering can come
	// back to it.
	Marks, Root uint64
}

const stampFields = 4

// Marshal encodes the stamp.
func (s FilterStamp) Marshal() []byte {
	return envelope.Seal(func(enc *msgpack.Encoder) error {
		return errors.Join(enc.EncodeArrayLen(stampFields), enc.EncodeInt64(s.Window),
			enc.EncodeUint64(s.TxID), enc.EncodeUint64(s.Marks), enc.EncodeUint64(s.Root))
	})
}

// Unmarshal decodes and validates the stamp.
func (s *FilterStamp) Unmarshal(raw []byte) error {
	return envelope.Unseal(raw, stampFields, func(dec *msgpack.Decoder) (err error) {
		if s.Window, err = dec.DecodeInt64(); err != nil {
			return err
		}
		if s.TxID, err = dec.DecodeUint64(); err != nil {
			return err
		}
		if s.Marks, err = dec.DecodeUint64(); err != nil {
			return err
		}
		s.Root, err = dec.DecodeUint64()
		return err
	})
}

// stampOf is the stamp of the current state of tx for the window starting
// at start.
func stampOf(tx *bolt.Tx, start int64) FilterStamp {
	s := FilterStamp{Window: start, TxID: uint64(tx.ID())}
	if w := tx.Bucket(WindowName(start)); w != nil {
		s.Marks, s.Root = WindowMarks(w), uint64(w.Root())
	}
	return s
}

// PutNewestFilter stores encoded as the filter of the newest window, the
// one starting at start, stamped with tx, a write transaction that must not
// write that window after this call.
func PutNewestFilter(tx *bolt.Tx, start int64, encoded []byte) error {
	b, err := tx.CreateBucketIfNotExists(ClosedRoot)
	if err != nil {
		return base.MapBoltErr(err)
	}
	if err := b.Put(closedFilterKey, encoded); err != nil {
		return base.MapBoltErr(err)
	}
	return base.MapBoltErr(b.Put(closedStampKey, stampOf(tx, start).Marshal()))
}

// DropNewestFilter deletes the persisted newest-window filter and its
// stamp, if any. Open calls it for a stamp it found stale: bbolt numbers
// transactions afresh in a compacted copy of the file, so a stale stamp
// left in place could, many commits later, name the file's transaction
// again while the window holds other keys, and be taken for proof.
func DropNewestFilter(tx *bolt.Tx) error {
	if tx.Bucket(ClosedRoot) == nil {
		return nil
	}
	return base.MapBoltErr(tx.DeleteBucket(ClosedRoot))
}

// NewestFilterState is what [NewestFilter] found.
type NewestFilterState uint8

// The states of a persisted newest-window filter.
const (
	// FilterCurrent: the filter describes the file as it is.
	FilterCurrent NewestFilterState = iota
	// FilterMissing: no filter was persisted (a store never closed by a
	// version that writes it).
	FilterMissing
	// FilterStale: the file changed after the filter was written: the
	// process that wrote since did not close cleanly, or the newest window
	// is another one.
	FilterStale
	// FilterDamaged: the stamp does not decode.
	FilterDamaged
)

// NewestFilter returns the persisted filter of the newest window, the one
// starting at start, when its stamp proves it current in tx, a read
// transaction taken before the opening process wrote anything; start is
// math.MinInt64 when the file has no live window, and then any stamp is
// stale. The slice
// points into tx's memory: decode it before tx ends. Otherwise it returns
// why not; err is the decoding error of a damaged stamp.
func NewestFilter(tx *bolt.Tx, start int64) (encoded []byte, state NewestFilterState, err error) {
	b := tx.Bucket(ClosedRoot)
	if b == nil {
		return nil, FilterMissing, nil
	}
	raw, encoded := b.Get(closedStampKey), b.Get(closedFilterKey)
	if raw == nil || encoded == nil {
		return nil, FilterMissing, nil
	}
	var s FilterStamp
	if err := s.Unmarshal(raw); err != nil {
		return nil, FilterDamaged, &base.RecordError{Bucket: string(ClosedRoot), Key: string(closedStampKey), Err: err}
	}
	if s != stampOf(tx, start) {
		return nil, FilterStale, nil
	}
	return encoded, FilterCurrent, nil
}

// CheckNewestFilter decodes the persisted newest-window filter's stamp and
// hands the filter to decode, for DB.Check; report gets each failure.
func CheckNewestFilter(tx *bolt.Tx, decode func([]byte) error, report func(error) error) error {
	b := tx.Bucket(ClosedRoot)
	if b == nil {
		return nil
	}
	if raw := b.Get(closedStampKey); raw != nil {
		var s FilterStamp
		if err := s.Unmarshal(raw); err != nil {
			if err := report(&base.RecordError{Bucket: string(ClosedRoot), Key: string(closedStampKey), Err: err}); err != nil {
				return err
			}
		}
	}
	if raw := b.Get(closedFilterKey); raw != nil {
		if err := decode(raw); err != nil {
			return report(&base.RecordError{Bucket: string(ClosedRoot), Key: string(closedFilterKey), Err: err})
		}
	}
	return nil
}
