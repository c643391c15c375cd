package bloom

import (
	"math"
	"sync"
)

// Sizing of one stage.
//
// The classic formula m/n = -ln(p)/ln(2)^2 assumes the k probes of a key
// land anywhere in the filter. In a blocked filter they land in one 512-bit
// block, and the number of keys per block varies (it is Poisson around the
// mean), so crowded blocks answer "maybe" more often than the average fill
// suggests. Sized with the classic formula, a blocked filter misses its
// target by 1.16x at 1%, 1.6x at 0.1% and 2.8x at 0.01%. We therefore size
// with a model of the blocked layout itself:
//
//	fpr(c, k) = sum over j of Poisson(j; 512/c) * (1 - (1-1/512)^(j*k))^k
//
// which is the probability that a key absent from the filter finds all k of
// its bits set in a block that holds j keys, averaged over the distribution
// of j, for c bits per key. For a target rate we pick the k that needs the
// fewest bits per key.

const (
	// minBitsPerKey keeps the Poisson mean at most 512, where e^-mean is
	// still a normal float64; below one bit per key a filter is useless
	// anyway.
	minBitsPerKey = 1.0
	// maxBitsPerKey is one key per block on average.
	maxBitsPerKey = blockBits
)

// stageParams is the result of sizing: bits per key and probes per key.
type stageParams struct {
	bitsPerKey float64
	k          int
}

// paramsCache memoizes sizing by target rate. Sizing costs about half a
// millisecond of math.Pow calls, and every window filter of a store asks for
// the same few rates (one per stage index). The cache is bounded so that a
// caller cycling through arbitrary rates cannot grow it without limit.
var paramsCache struct {
	sync.Mutex
	m map[float64]stageParams
}

const paramsCacheMax = 256

// paramsFor returns the cheapest (bitsPerKey, k) whose modeled rate is at
// most rate. ok is false when no k in [1, maxK] reaches the rate within
// maxBitsPerKey.
func paramsFor(rate float64) (stageParams, bool) {
	paramsCache.Lock()
	p, hit := paramsCache.m[rate]
	paramsCache.Unlock()
	if hit {
		return p, true
	}
	best := stageParams{bitsPerKey: math.Inf(1)}
	worse := 0
	for k := 1; k <= maxK; k++ {
		c, ok := minBitsPerKeyFor(rate, k)
		if !ok {
			continue
		}
		if c < best.bitsPerKey {
			best = stageParams{bitsPerKey: c, k: k}
			worse = 0
			continue
		}
		// Bits needed are unimodal in k; a few steps past the minimum is
		// enough to be sure we left it behind.
		if worse++; worse >= 3 {
			break
		}
	}
	if best.k == 0 {
		return stageParams{}, false
	}
	paramsCache.Lock()
	if paramsCache.m == nil {
		paramsCache.m = make(map[float64]stageParams)
	}
	if len(paramsCache.m) < paramsCacheMax {
		paramsCache.m[rate] = best
	}
	paramsCache.Unlock()
	return best, true
}

// minBitsPerKeyFor bisects for the fewest bits per key at which k probes
// reach rate. The modeled rate falls monotonically as bits per key grow,
// because fewer keys share each block.
func minBitsPerKeyFor(rate float64, k int) (float64, bool) {
	lo, hi := minBitsPerKey, float64(maxBitsPerKey)
	if blockedFPR(hi, k) > rate {
		return 0, false
	}
	if blockedFPR(lo, k) <= rate {
		return lo, true
	}
	// 0.01 bits per key is far below what rounding to whole blocks adds.
	for hi-lo > 0.01 {
		mid := (lo + hi) / 2
		if blockedFPR(mid, k) <= rate {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, true
}

// blockedFPR is the modeled false-positive rate of a 512-bit blocked filter
// holding bitsPerKey bits per key with k probes per key; see the comment at
// the top of this file. bitsPerKey must be at least minBitsPerKey.
func blockedFPR(bitsPerKey float64, k int) float64 {
	mean := blockBits / bitsPerKey
	// stayZero is the chance that one given bit survives one key's k probes.
	stayZero := math.Pow(1-1.0/blockBits, float64(k))
	pmf := math.Exp(-mean) // Poisson(0; mean), updated by recurrence
	zeroAfter := 1.0       // stayZero^j
	sum := 0.0
	// Beyond mean + 12 standard deviations (+ slack for tiny means) the
	// Poisson tail is below 1e-30, far under any rate we size for.
	last := int(mean + 12*math.Sqrt(mean) + 30)
	for j := 0; j <= last; j++ {
		if j > 0 {
			pmf *= mean / float64(j)
			zeroAfter *= stayZero
		}
		sum += pmf * math.Pow(1-zeroAfter, float64(k))
	}
	return sum
}

// Budget split across stages.
//
// A filter's stages are checked together, so the union bound gives
// compound rate <= sum of stage rates. Stage 0 is sized for the planned key
// count and is all most filters ever have, so it gets three quarters of the
// budget; the remaining quarter is split geometrically over the growth
// stages (1/8, 1/16, ... of the target), which sums to the target for any
// number of stages. Spending more on stage 0 would leave too little for
// growth stages, which would then need many bits per key.
const stage0Share = 0.75

// stageRate is the false-positive rate stage i of a filter targeting fpRate
// is sized for.
func stageRate(fpRate float64, i int) float64 {
	if i == 0 {
		return fpRate * stage0Share
	}
	return fpRate * (1 - stage0Share) * math.Ldexp(1, -i)
}
