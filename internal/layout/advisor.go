package layout

import (
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/envelope"
)

// advisorKey holds the window advisor's record in MetaRoot: how old the
// duplicates of each handler were, summed over every process that closed
// the store cleanly, for `oncekv advise`.
var advisorKey = []byte("advisor")

// AgeBuckets is the number of buckets of an age histogram.
const AgeBuckets = 31

// Advisor is the window advisor's record.
type Advisor struct {
	SavedAt            int64 // Unix nanoseconds
	Retention          int64 // nanoseconds, as the saving process had them
	TombstoneRetention int64
	Handlers           []AdvisorHandler // in name order; the last one may be Other
	Other              AdvisorHandler   // the handlers past the cap
}

// AdvisorHandler is one handler's figures.
type AdvisorHandler struct {
	Name                string
	TombstoneDuplicates uint64
	LateDuplicates      uint64
	Count               uint64
	Sum, Max            int64 // nanoseconds
	Buckets             [AgeBuckets]uint64
}

const (
	advisorFields = 5
	handlerFields = 7
)

// Marshal encodes the record.
func (a *Advisor) Marshal() []byte {
	return envelope.Seal(func(enc *msgpack.Encoder) error {
		errs := []error{enc.EncodeArrayLen(advisorFields), enc.EncodeInt64(a.SavedAt), enc.EncodeInt64(a.Retention),
			enc.EncodeInt64(a.TombstoneRetention), enc.EncodeArrayLen(len(a.Handlers))}
		for i := range a.Handlers {
			errs = append(errs, a.Handlers[i].encode(enc))
		}
		return errors.Join(append(errs, a.Other.encode(enc))...)
	})
}

func (h *AdvisorHandler) encode(enc *msgpack.Encoder) error {
	errs := []error{enc.EncodeArrayLen(handlerFields), enc.EncodeString(h.Name), enc.EncodeUint64(h.TombstoneDuplicates),
		enc.EncodeUint64(h.LateDuplicates), enc.EncodeUint64(h.Count), enc.EncodeInt64(h.Sum), enc.EncodeInt64(h.Max),
		enc.EncodeArrayLen(AgeBuckets)}
	for _, n := range h.Buckets {
		errs = append(errs, enc.EncodeUint64(n))
	}
	return errors.Join(errs...)
}

// maxAdvisorHandlers bounds the handlers a record may hold, whatever a
// damaged one says: decoding never allocates for more.
const maxAdvisorHandlers = 1 << 20

// Unmarshal decodes and validates the record: cumulative buckets that
// never go down, none above the count, no negative duration.
func (a *Advisor) Unmarshal(raw []byte) error {
	return envelope.Unseal(raw, advisorFields, func(dec *msgpack.Decoder) (err error) {
		if a.SavedAt, err = dec.DecodeInt64(); err != nil {
			return err
		}
		if a.Retention, err = dec.DecodeInt64(); err != nil {
			return err
		}
		if a.TombstoneRetention, err = dec.DecodeInt64(); err != nil {
			return err
		}
		n, err := dec.DecodeArrayLen()
		switch {
		case err != nil:
			return err
		case n < 0 || n > maxAdvisorHandlers:
			return fmt.Errorf("%d handlers", n)
		}
		a.Handlers = make([]AdvisorHandler, 0, min(n, 1024))
		for i := range n {
			var h AdvisorHandler
			if err := h.decode(dec); err != nil {
				return fmt.Errorf("handler %d: %w", i, err)
			}
			if i > 0 && a.Handlers[i-1].Name >= h.Name {
				return errors.New("handlers out of order")
			}
			a.Handlers = append(a.Handlers, h)
		}
		return a.Other.decode(dec)
	})
}

func (h *AdvisorHandler) decode(dec *msgpack.Decoder) (err error) {
	if n, err := dec.DecodeArrayLen(); err != nil || n != handlerFields {
		return errors.Join(err, fmt.Errorf("%d fields, want %d", n, handlerFields))
	}
	if h.Name, err = dec.DecodeString(); err != nil {
		return err
	}
	for _, p := range []*uint64{&h.TombstoneDuplicates, &h.LateDuplicates, &h.Count} {
		if *p, err = dec.DecodeUint64(); err != nil {
			return err
		}
	}
	if h.Sum, err = dec.DecodeInt64(); err != nil {
		return err
	}
	if h.Max, err = dec.DecodeInt64(); err != nil {
		return err
	}
	if n, err := dec.DecodeArrayLen(); err != nil || n != AgeBuckets {
		return errors.Join(err, fmt.Errorf("%d buckets, want %d", n, AgeBuckets))
	}
	var below uint64
	for i := range h.Buckets {
		if h.Buckets[i], err = dec.DecodeUint64(); err != nil {
			return err
		}
		if h.Buckets[i] < below {
			return errors.New("bucket counts go down")
		}
		below = h.Buckets[i]
	}
	if below > h.Count || h.Sum < 0 || h.Max < 0 {
		return errors.New("counts or durations out of range")
	}
	return nil
}

// ReadAdvisor returns the advisor's record; ok is false when the store has
// none.
func ReadAdvisor(tx *bolt.Tx) (a Advisor, ok bool, err error) {
	meta := tx.Bucket(MetaRoot)
	if meta == nil {
		return a, false, fmt.Errorf("%w: system bucket %q is missing", base.ErrCorrupt, MetaRoot)
	}
	raw := meta.Get(advisorKey)
	if raw == nil {
		return a, false, nil
	}
	if err := a.Unmarshal(raw); err != nil {
		return a, false, &base.RecordError{Bucket: string(MetaRoot), Key: string(advisorKey), Err: err}
	}
	return a, true, nil
}

// WriteAdvisor stores the advisor's record.
func WriteAdvisor(tx *bolt.Tx, a *Advisor) error {
	return base.MapBoltErr(tx.Bucket(MetaRoot).Put(advisorKey, a.Marshal()))
}
