package bucket

import (
	"fmt"

	"github.com/oncekv/oncekv/fence"
	"github.com/oncekv/oncekv/internal/base"
)

// Sequence returns the last number NextSequence handed out, 0 before the
// first (or once the transaction has ended).
func (b *Bucket) Sequence() uint64 {
	if b.life.Ended() {
		return 0
	}
	return b.b.Sequence() & seqMask
}

// RaiseSequence makes the bucket's sequence at least n, so that
// NextSequence hands out numbers greater than n from then on; a sequence
// there or above already is left as it is. It never lowers the sequence,
// so no number is handed out twice: it is how a store loaded from a dump
// goes on from where the other one was. Errors: ErrTxClosed,
// ErrTxNotWritable, fence.ErrExhausted (oncekv.ErrExhausted) for an n past the sequence's range.
func (b *Bucket) RaiseSequence(n uint64) error {
	switch {
	case b.life.Ended():
		return ErrTxClosed
	case !b.b.Writable():
		return ErrTxNotWritable
	case n > seqMask:
		return fmt.Errorf("oncekv: sequence %d of bucket %q: %w", n, base.Clip(string(b.name)), fence.ErrExhausted)
	}
	seq := b.b.Sequence()
	if seq&seqMask >= n {
		return nil
	}
	return base.MapBoltErr(b.b.SetSequence(seq&^seqMask | n))
}
