// Package bloom is the Bloom filter oncekv keeps in front of each live
// dedup window: a negative answer ("definitely not seen") lets an unseen
// key skip that window's B-tree look-ups. A positive answer is only a hint
// and must be confirmed by the exact look-up. The root package keeps one
// per live window and re-exports none of this package:
// oncekv.Options.BloomFalsePositiveRate sets the rate.
//
// # Hashing
//
// The filter works on precomputed 64-bit hashes, so that one hash of a key
// (oncekv hashes the encoded (handler, key) of a mark with Sum64) can be
// tested against every window's filter. Sum64 is xxHash64 with seed 0:
// stable across processes, platforms and releases, as persisted filters
// require.
//
// # Layout
//
// Each key sets k bits inside one 512-bit block, a single cache line, so
// Add and MayContain touch one line of memory per stage. The block comes
// from the top 32 bits of the hash; the bits within it from repeatedly
// multiplying the hash by an odd constant and taking the top 9 bits.
// Blocked filters need a few percent more bits than classic ones for the
// same false-positive rate (more at very low rates); New sizes with a model
// of the blocked layout, not the classic formula.
//
// # Growth
//
// A filter is a chain of stages (a scalable Bloom filter). The first is
// sized for the planned key count at three quarters of the target rate.
// When the newest stage fills, Add appends one with twice the capacity and
// half the rate of the previous growth stage, 1/8, 1/16, ... of the target,
// so the stage rates sum to at most the target at any fill. MayContain
// checks every stage. Growth stops at 16 stages, whose last holds 2^15
// times the planned keys; past that the rate degrades instead.
//
// # Concurrency
//
// Bits are set with atomic OR and read with atomic loads; stages are
// published through an atomic pointer to an immutable list. MayContain is
// lock-free and allocation-free, Add may run on many goroutines, and a
// returned Add is visible to every later MayContain.
//
// # Encoding
//
// MarshalBinary writes a self-describing encoding: magic, format version,
// hash algorithm, parameters, per-stage descriptors, the bits in
// little-endian words, and a CRC-32C of everything before it. Decode
// validates every field before allocating and returns errors wrapping
// ErrCorrupt or ErrUnsupported; it never panics on hostile input and never
// allocates more than the input's length suggests.
package bloom
