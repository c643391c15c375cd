package bloom

import (
	"encoding/binary"
	"math/bits"
)

// The five primes of xxHash64, from the algorithm's public specification.
const (
	prime1 uint64 = 0x9E3779B185EBCA87
	prime2 uint64 = 0xC2B2AE3D27D4EB4F
	prime3 uint64 = 0x165667B19E3779F9
	prime4 uint64 = 0x85EBCA77C2B2AE63
	prime5 uint64 = 0x27D4EB2F165667C5
)

// stripeLen is the number of bytes xxHash64 consumes per main-loop step:
// four independent 8-byte lanes.
const stripeLen = 32

// Sum64 returns the xxHash64 (seed 0) of b.
//
// The value is the same in every process, on every platform and in every
// release of this package: filters are persisted, so a key must hash
// tomorrow exactly as it hashed when it was added. That is why the standard
// library's hash/maphash, which is randomly seeded per process, cannot be
// used here.
func Sum64(b []byte) uint64 {
	return sum64Seed(b, 0)
}

// sum64Seed is the one-shot xxHash64. The seed is only exercised by the
// reference test vectors; the filter format fixes it at 0.
func sum64Seed(b []byte, seed uint64) uint64 {
	total := uint64(len(b))
	var h uint64
	if len(b) >= stripeLen {
		// Lanes live in locals, not an array, so they stay in registers.
		v1, v2, v3, v4 := seed+prime1+prime2, seed+prime2, seed, seed-prime1
		for len(b) >= stripeLen {
			v1 = round(v1, binary.LittleEndian.Uint64(b[0:8]))
			v2 = round(v2, binary.LittleEndian.Uint64(b[8:16]))
			v3 = round(v3, binary.LittleEndian.Uint64(b[16:24]))
			v4 = round(v4, binary.LittleEndian.Uint64(b[24:32]))
			b = b[stripeLen:]
		}
		h = mergeLanes([4]uint64{v1, v2, v3, v4})
	} else {
		h = seed + prime5
	}
	return finish(h+total, b)
}

// round folds one 8-byte lane input into an accumulator.
func round(acc, in uint64) uint64 {
	acc += in * prime2
	acc = bits.RotateLeft64(acc, 31)
	return acc * prime1
}

// mergeLanes collapses the four lanes once the input had at least one stripe.
func mergeLanes(v [4]uint64) uint64 {
	h := bits.RotateLeft64(v[0], 1) + bits.RotateLeft64(v[1], 7) +
		bits.RotateLeft64(v[2], 12) + bits.RotateLeft64(v[3], 18)
	for _, x := range v {
		h ^= round(0, x)
		h = h*prime1 + prime4
	}
	return h
}

// finish consumes the tail (fewer than 32 bytes) and applies the final
// avalanche, so that every input bit affects every output bit.
func finish(h uint64, tail []byte) uint64 {
	for len(tail) >= 8 {
		h ^= round(0, binary.LittleEndian.Uint64(tail))
		h = bits.RotateLeft64(h, 27)*prime1 + prime4
		tail = tail[8:]
	}
	if len(tail) >= 4 {
		h ^= uint64(binary.LittleEndian.Uint32(tail)) * prime1
		h = bits.RotateLeft64(h, 23)*prime2 + prime3
		tail = tail[4:]
	}
	for _, c := range tail {
		h ^= uint64(c) * prime5
		h = bits.RotateLeft64(h, 11) * prime1
	}
	h ^= h >> 33
	h *= prime2
	h ^= h >> 29
	h *= prime3
	h ^= h >> 32
	return h
}
