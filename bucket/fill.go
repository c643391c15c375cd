package bucket

import (
	"bytes"

	"github.com/oncekv/oncekv/internal/base"
)

// packAppends tells bbolt to pack the bucket's pages full at this
// transaction's commit while every key it writes goes after the bucket's
// last one, as an effect keyed by an offset or a ULID does, and to leave
// them at its default otherwise (see base.AppendFill). Without it, rows
// written in key order take twice their size on disk.
//
// The bucket's last key is looked up once per Bucket value; after that,
// a key after the previous one written through it is an append. Once a
// write went between keys the transaction is settled, and nothing more is
// looked up. (A key written through another Bucket value of the same
// bucket in between can make one insert pass for an append: the cost is
// a fuller page, never a wrong answer.)
func (b *Bucket) packAppends(key []byte) {
	if base.Inserting(b.b) {
		return
	}
	last := b.last
	if last == nil {
		last, _ = b.b.Cursor().Last()
	}
	appended := last == nil || bytes.Compare(key, last) > 0
	base.SetFill(b.b, appended)
	if appended {
		b.last = append(b.last[:0], key...) // the caller may reuse key
	}
}
