package bloom_test

import (
	"hash/crc64"
	"hash/fnv"
	"hash/maphash"
	"testing"

	"github.com/oncekv/oncekv/bloom"
)

// benchKey is 40 bytes, the size of a handler name plus a UUID-like key.
var benchKey = []byte("orders.charge/3f6c1d52-5b1e-4a43-9d55-0f")

var sink uint64

// BenchmarkSum64 compares our xxHash64 with the standard library's
// candidates on a 40-byte key. maphash is the fastest but cannot be used
// (its seed is random per process); fnv and crc64 are stable but slower.
func BenchmarkSum64(b *testing.B) {
	b.Run("xxhash64", func(b *testing.B) {
		b.SetBytes(int64(len(benchKey)))
		for b.Loop() {
			sink += bloom.Sum64(benchKey)
		}
	})
	b.Run("stdlib-fnv1a", func(b *testing.B) {
		b.SetBytes(int64(len(benchKey)))
		h := fnv.New64a()
		for b.Loop() {
			h.Reset()
			h.Write(benchKey)
			sink += h.Sum64()
		}
	})
	b.Run("stdlib-crc64", func(b *testing.B) {
		b.SetBytes(int64(len(benchKey)))
		tab := crc64.MakeTable(crc64.ECMA)
		for b.Loop() {
			sink += crc64.Checksum(benchKey, tab)
		}
	})
	b.Run("stdlib-maphash-unusable", func(b *testing.B) {
		b.SetBytes(int64(len(benchKey)))
		seed := maphash.MakeSeed()
		for b.Loop() {
			sink += maphash.Bytes(seed, benchKey)
		}
	})
}

const benchKeys = 1_000_000

// benchHashes returns n distinct key hashes of a namespace.
func benchHashes(namespace string, n int) []uint64 {
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = keyHash(namespace, uint64(i))
	}
	return hs
}

// reportBitsPerKey reports the filter's memory per planned key.
func reportBitsPerKey(b *testing.B, f *bloom.Filter) {
	b.ReportMetric(float64(f.SizeBytes()*8)/benchKeys, "bits/key")
}

// BenchmarkAdd adds 1e6 distinct keys to a filter planned for them at 1%,
// starting a fresh filter whenever they run out so every Add is a new key.
func BenchmarkAdd(b *testing.B) {
	hs := benchHashes("add", benchKeys)
	f, _ := bloom.New(benchKeys, 0.01)
	i := 0
	for b.Loop() {
		if i == len(hs) {
			b.StopTimer()
			f, _ = bloom.New(benchKeys, 0.01)
			i = 0
			b.StartTimer()
		}
		f.Add(hs[i])
		i++
	}
	reportBitsPerKey(b, f)
}

// BenchmarkMayContain queries a full filter (1e6 keys at 1%) with added
// keys (hit: all k probes run) and with absent keys (miss: usually stops
// after one or two probes).
func BenchmarkMayContain(b *testing.B) {
	f, _ := bloom.New(benchKeys, 0.01)
	for _, h := range benchHashes("present", benchKeys) {
		f.Add(h)
	}
	for _, tc := range []struct {
		name string
		hs   []uint64
	}{
		{"hit", benchHashes("present", benchKeys)},
		{"miss", benchHashes("absent", benchKeys)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			i, n := 0, 0
			for b.Loop() {
				if f.MayContain(tc.hs[i]) {
					n++
				}
				if i++; i == len(tc.hs) {
					i = 0
				}
			}
			sink += uint64(n)
			reportBitsPerKey(b, f)
		})
	}
	b.Run("miss-parallel", func(b *testing.B) {
		hs := benchHashes("absent", benchKeys)
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				f.MayContain(hs[i])
				if i++; i == len(hs) {
					i = 0
				}
			}
		})
		reportBitsPerKey(b, f)
	})
}
