package base

import bolt "go.etcd.io/bbolt"

// AppendFill is the FillPercent of a bucket in a transaction whose every
// write to it went after the bucket's last key, as keys that grow
// (offsets, counters, ULIDs, UUIDv7) do. bbolt splits a page that
// overflows at FillPercent of its size and never refills the left part:
// at its default, 0.5, appended keys leave every page half empty for good.
// At AppendFill the left pages are packed, which halves the bytes per key.
// Keys that land between others keep bbolt's default, which leaves the
// room inserts there need without splitting a page at each one.
const AppendFill = 1.0

// insertFill is bbolt's default, marked sticky: a bucket's FillPercent is
// per transaction (bbolt hands each transaction its own *Bucket, at the
// default), so it also records what the transaction did there. Once a key
// lands between others, it stays insertFill, whatever the transaction's
// later writes do.
const insertFill = bolt.DefaultFillPercent + 1e-9

// SetFill moves b's FillPercent on after one write: to AppendFill while
// every write of the transaction to b appended, to insertFill for good at
// the first that did not.
func SetFill(b *bolt.Bucket, appended bool) {
	switch {
	case b.FillPercent == insertFill:
	case appended:
		b.FillPercent = AppendFill
	default:
		b.FillPercent = insertFill
	}
}

// Inserting reports whether a write of this transaction to b went between
// keys, so that the caller need not look for b's last key any more.
func Inserting(b *bolt.Bucket) bool { return b.FillPercent == insertFill }
