// Package fence holds the vocabulary of oncekv's ordering guarantees: the
// errors a fenced or versioned write returns, and the error types that carry
// the stored and the presented number. The root package re-exports all of
// them (oncekv.ErrFenced, oncekv.FenceError, ...); the storage behind them
// is internal to oncekv.
//
// Deduplication does not fix reordering: set(x,1) held up by a GC pause and
// applied after set(x,2) is applied once, and wrongly. A fence fixes it. A
// writer takes a token that only grows (DB.NextFence, a claim's token, a
// Kafka offset), and a write of a key applies only if its token is strictly
// greater than the one stored with the key (Bucket.PutFenced), so the late
// set(x,1) is refused with ErrFenced instead of winning. A version does the
// same for read-modify-write: a compare-and-set (Bucket.PutIfVersion)
// applies only if nobody wrote the key since it was read, else
// ErrVersionConflict.
//
// ErrFenced means give up, not retry: a newer writer owns the key.
package fence
