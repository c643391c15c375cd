// Package fence keeps oncekv's ordering state: store-issued fencing tokens,
// and the fence and version of every user key written with one.
//
// Deduplication does not fix reordering: set(x,1) held up by a GC pause and
// applied after set(x,2) is applied once, and wrongly. A fence fixes it. A
// writer takes a token that only grows, and a write of a key applies only if
// its token is strictly greater than the one stored with the key, so the
// late set(x,1) is refused instead of winning. A version does the same for
// read-modify-write: a compare-and-set applies only if nobody wrote the key
// since it was read.
//
// # Layout
//
// Everything lives in oncekv's system bucket of fences (the caller passes
// it in, so this package does not depend on the file's root layout). The
// first byte of each entry says what it is:
//
//	't' resource          token counter: the last token NextFence issued for resource
//	'c'                   token counter: the last claim token issued
//	'k' user bucket name  a bucket: user key -> key record (fence, version)
//
// Records are a format-version byte, fixed-width big-endian integers and a
// CRC-32C of both: a counter is 13 bytes, a key record 21. They hold only
// integers, so a fixed layout replaces msgpack here: a fenced write decodes
// its record without allocating, and a record of another kind or version is
// caught by its length even when its checksum is right. A record that fails
// any check is a *RecordError, never a silently smaller fence.
//
// Nothing here is ever deleted: a counter that went back to zero could issue
// a token twice, and a fence dropped with its key would let a stale writer
// resurrect the key. Every function runs inside the caller's bbolt write
// transaction, so a token or a fence is durable exactly when that
// transaction commits.
package fence
