package bucket

import (
	"bytes"

	"github.com/oncekv/oncekv/internal/base"
)

// packAppends tells bbolt to pack the bucket's pages full at this
// transaction's commit while every key it writes goes after the bucket's
// last one, as an effect keyed by an offset or a ULID does, and to leave
// them at its default otherwise (see base.AppendFill). Without it, rows
// written in key order take twice their size on disk. Once a write went
// between keys the transaction is settled, and no more look-ups are made.
func (b *Bucket) packAppends(key []byte) {
	if base.Inserting(b.b) {
		return
	}
	last, _ := b.b.Cursor().Last()
	base.SetFill(b.b, last == nil || bytes.Compare(key, last) > 0)
}
