// Package bucket owns oncekv's on-disk layout inside the bbolt file: the
// system buckets that hold dedup marks and metadata, the user namespace that
// application code writes to, and the versioned, checksummed msgpack codecs
// of every system record.
//
// # Layout
//
// Every bucket sits at the root of the bbolt file, under one of two
// disjoint name prefixes:
//
//	oncekv.meta               format record (magic, format version, creation
//	                          time) and expiry record (the expiry floor)
//	oncekv.fences             per-resource fencing-token counters and per-key fences
//	oncekv.filters            the Bloom filters of sealed windows, by window start
//	oncekv.window/<8 bytes>   one bucket per time window, named by the window's
//	                          start as a sortable big-endian integer; inside, one
//	                          mark per (handler, key)
//	u/<name>                  the user bucket <name>
//
// User code reaches user buckets only through [Bucket], and every name it
// passes is put behind the "u/" prefix, so no user call can name, read or
// overwrite a system bucket, whatever name it passes. The layout is flat
// because each level of bucket nesting is one more page written per commit.
//
// # Records
//
// A system record is a format-version byte, a msgpack body and a CRC-32C of
// both. Decoding checks all three and reports a *[RecordError] naming the
// bucket and key, so corruption inside a record is an error, never a panic
// and never a silently wrong value.
package bucket
