package bloomcmp

import (
	"fmt"
	"strconv"
	"sync"
	"testing"

	bbloom "github.com/bits-and-blooms/bloom/v3"

	"github.com/oncekv/oncekv/bloom"
)

const (
	numKeys = 1_000_000
	fpRate  = 0.01
	keyLen  = 40
)

// filter is the surface both peers are measured through. Keys go in as
// bytes, so each peer pays for its own hashing: xxHash64 for oncekv,
// murmur3-128 for bits-and-blooms.
type filter interface {
	add(key []byte)
	test(key []byte) bool
	sizeBits() int
}

type peer struct {
	name string
	new  func(n uint64, p float64) filter
}

var peers = []peer{
	{"oncekv", newOncekv},
	{"bitsandblooms", newBitsAndBlooms},
	// oncekv sizes its first stage for 3/4 of the target, keeping the
	// rest for growth, so at 1% it actually delivers about 0.75%. This
	// row sizes bits-and-blooms for that delivered rate, to separate the
	// cost of the growth budget from the cost of blocking.
	{"bitsandblooms-equalfp", func(n uint64, _ float64) filter { return newBitsAndBlooms(n, 0.0075) }},
}

type oncekvFilter struct{ f *bloom.Filter }

func newOncekv(n uint64, p float64) filter {
	f, err := bloom.New(n, p)
	if err != nil {
		panic(err) // constant, valid parameters
	}
	return oncekvFilter{f}
}

func (o oncekvFilter) add(key []byte)       { o.f.Add(bloom.Sum64(key)) }
func (o oncekvFilter) test(key []byte) bool { return o.f.MayContain(bloom.Sum64(key)) }
func (o oncekvFilter) sizeBits() int        { return o.f.SizeBytes() * 8 }

type bitsAndBloomsFilter struct{ f *bbloom.BloomFilter }

func newBitsAndBlooms(n uint64, p float64) filter {
	return bitsAndBloomsFilter{bbloom.NewWithEstimates(uint(n), p)}
}

func (b bitsAndBloomsFilter) add(key []byte)       { b.f.Add(key) }
func (b bitsAndBloomsFilter) test(key []byte) bool { return b.f.Test(key) }
func (b bitsAndBloomsFilter) sizeBits() int        { return int(b.f.Cap()) }

// keySet holds n keys of keyLen bytes in one allocation; a namespace
// keeps present and absent keys disjoint.
type keySet struct{ buf []byte }

func newKeySet(namespace string, n int) keySet {
	ks := keySet{buf: make([]byte, 0, n*keyLen)}
	for i := range n {
		k := fmt.Appendf(nil, "%s/3f6c1d52-5b1e-4a43-", namespace)
		k = append(k, fmt.Sprintf("%0*s", keyLen-len(k), strconv.FormatUint(uint64(i), 16))...)
		ks.buf = append(ks.buf, k[:keyLen]...)
	}
	return ks
}

func (ks keySet) key(i int) []byte { return ks.buf[i*keyLen : (i+1)*keyLen : (i+1)*keyLen] }

var keys = sync.OnceValues(func() (present, absent keySet) {
	return newKeySet("present", numKeys), newKeySet("absent", numKeys)
})

// full returns, once per peer, a filter holding every present key and its
// measured false-positive rate over all absent keys.
var full = sync.OnceValue(func() map[string]fullFilter {
	present, absent := keys()
	m := make(map[string]fullFilter)
	for _, p := range peers {
		f := p.new(numKeys, fpRate)
		for i := range numKeys {
			f.add(present.key(i))
		}
		fp := 0
		for i := range numKeys {
			if f.test(absent.key(i)) {
				fp++
			}
		}
		m[p.name] = fullFilter{f, float64(fp) / numKeys}
	}
	return m
})

type fullFilter struct {
	f      filter
	fpRate float64
}

func report(b *testing.B, f fullFilter) {
	b.ReportMetric(float64(f.f.sizeBits())/numKeys, "bits/key")
	b.ReportMetric(100*f.fpRate, "fp%")
}

// BenchmarkAdd adds distinct keys to a filter planned for 1e6 keys at 1%,
// starting a fresh filter whenever the keys run out.
func BenchmarkAdd(b *testing.B) {
	present, _ := keys()
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			f := p.new(numKeys, fpRate)
			i := 0
			for b.Loop() {
				if i == numKeys {
					b.StopTimer()
					f, i = p.new(numKeys, fpRate), 0
					b.StartTimer()
				}
				f.add(present.key(i))
				i++
			}
			report(b, full()[p.name])
		})
	}
}

// BenchmarkTest queries a filter holding 1e6 keys, with added keys (hit)
// and never-added keys (miss, the case a dedup filter exists for).
func BenchmarkTest(b *testing.B) {
	present, absent := keys()
	for _, p := range peers {
		ff := full()[p.name]
		for _, q := range []struct {
			name string
			keys keySet
		}{{"hit", present}, {"miss", absent}} {
			b.Run(p.name+"/"+q.name, func(b *testing.B) {
				i, n := 0, 0
				for b.Loop() {
					if ff.f.test(q.keys.key(i)) {
						n++
					}
					if i++; i == numKeys {
						i = 0
					}
				}
				if q.name == "hit" && n != b.N {
					b.Fatalf("%s: %d false negatives", p.name, b.N-n)
				}
				report(b, ff)
			})
		}
	}
}
