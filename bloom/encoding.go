package bloom

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
)

// Encoding, version 1. All integers are little-endian.
//
//	header (32 bytes)
//	   0  magic          "OKBF"
//	   4  version        uint8   = 1
//	   5  hash algorithm uint8   = 1 (xxHash64, seed 0: Sum64)
//	   6  reserved       uint16  = 0
//	   8  fpRate         float64 (IEEE 754 bits)
//	  16  planned keys   uint64
//	  24  stage count    uint32
//	  28  reserved       uint32  = 0
//	stage descriptors (32 bytes each, oldest stage first)
//	   0  capacity       uint64  = planned << stage index
//	   8  count          uint64
//	  16  block count    uint64
//	  24  k              uint32
//	  28  reserved       uint32  = 0
//	stage bits, in descriptor order: block count * 8 words of uint64
//	trailer: CRC-32C (Castagnoli) of every byte before it, uint32
//
// Reserved fields must be zero, so every filter has exactly one encoding
// and a decoded filter re-encodes to the same bytes. Each stage must hold
// at least max(1, log2(1/stage rate)) bits per key of capacity, where the
// stage rates split fpRate as described in the package documentation.
const (
	magic         = "OKBF"
	formatVersion = 1
	hashXXH64     = 1

	headerSize     = 32
	descriptorSize = 32
	trailerSize    = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodedSize returns the length of the encoding MarshalBinary would
// produce now.
func (f *Filter) EncodedSize() int {
	return f.state.Load().encodedSize()
}

func (st *state) encodedSize() int {
	n := headerSize + len(st.stages)*descriptorSize + trailerSize
	for _, s := range st.stages {
		n += len(s.blocks) * blockBytes
	}
	return n
}

// MarshalBinary encodes the filter; see AppendBinary.
func (f *Filter) MarshalBinary() ([]byte, error) {
	return f.AppendBinary(nil)
}

// AppendBinary appends the filter's encoding to b. It may run concurrently
// with Add: every Add that returned before the call is included, Adds
// running during it may or may not be. It never fails; the error is there
// to satisfy encoding.BinaryAppender.
func (f *Filter) AppendBinary(b []byte) ([]byte, error) {
	st := f.state.Load()
	start := len(b)
	b = slices.Grow(b, st.encodedSize())

	b = append(b, magic...)
	b = append(b, formatVersion, hashXXH64, 0, 0)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(st.fpRate))
	b = binary.LittleEndian.AppendUint64(b, st.planned)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(st.stages)))
	b = binary.LittleEndian.AppendUint32(b, 0)
	for _, s := range st.stages {
		b = binary.LittleEndian.AppendUint64(b, s.capacity)
		b = binary.LittleEndian.AppendUint64(b, s.count.Load())
		b = binary.LittleEndian.AppendUint64(b, uint64(len(s.blocks)))
		b = binary.LittleEndian.AppendUint32(b, uint32(s.k))
		b = binary.LittleEndian.AppendUint32(b, 0)
	}
	for _, s := range st.stages {
		for i := range s.blocks {
			for w := range s.blocks[i] {
				b = binary.LittleEndian.AppendUint64(b, s.blocks[i][w].Load())
			}
		}
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli)), nil
}

// UnmarshalBinary replaces the filter's contents with the decoded data; see
// Decode. It may be called on the zero Filter. Calls of other methods that
// run concurrently see either the old or the new contents. On error the
// filter is left unchanged.
func (f *Filter) UnmarshalBinary(data []byte) error {
	g, err := Decode(data)
	if err != nil {
		return err
	}
	f.growMu.Lock()
	defer f.growMu.Unlock()
	f.state.Store(g.state.Load())
	return nil
}

// Decode parses an encoding produced by MarshalBinary or AppendBinary.
//
// It checks the checksum, then every field, before allocating anything:
// errors wrap ErrCorrupt (damaged or inconsistent input) or ErrUnsupported
// (an intact encoding from a newer format or another hash algorithm).
// The memory it allocates is bounded by len(data). The filter does not
// retain data.
func Decode(data []byte) (*Filter, error) {
	if len(data) < headerSize+trailerSize {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the %d-byte minimum",
			ErrCorrupt, len(data), headerSize+trailerSize)
	}
	// The checksum comes first so that a flipped version or algorithm
	// byte reads as corruption, not as a format from the future.
	body := data[:len(data)-trailerSize]
	want := binary.LittleEndian.Uint32(data[len(body):])
	if got := crc32.Checksum(body, castagnoli); got != want {
		return nil, fmt.Errorf("%w: checksum %#08x, stored %#08x", ErrCorrupt, got, want)
	}
	if string(body[0:4]) != magic {
		return nil, fmt.Errorf("%w: bad magic %q", ErrCorrupt, body[0:4])
	}
	if v := body[4]; v != formatVersion {
		return nil, fmt.Errorf("%w: format version %d, want %d", ErrUnsupported, v, formatVersion)
	}
	if a := body[5]; a != hashXXH64 {
		return nil, fmt.Errorf("%w: hash algorithm %d, want %d (xxHash64)", ErrUnsupported, a, hashXXH64)
	}
	if r1, r2 := binary.LittleEndian.Uint16(body[6:]), binary.LittleEndian.Uint32(body[28:]); r1 != 0 || r2 != 0 {
		return nil, fmt.Errorf("%w: reserved header fields %#x, %#x not zero", ErrCorrupt, r1, r2)
	}
	fpRate := math.Float64frombits(binary.LittleEndian.Uint64(body[8:]))
	if !(fpRate > 0 && fpRate < 1) {
		return nil, fmt.Errorf("%w: false-positive rate %v not in (0, 1)", ErrCorrupt, fpRate)
	}
	planned := binary.LittleEndian.Uint64(body[16:])
	if planned == 0 || planned > maxPlannedKeys {
		return nil, fmt.Errorf("%w: planned keys %d not in [1, %d]", ErrCorrupt, planned, uint64(maxPlannedKeys))
	}
	nstages := binary.LittleEndian.Uint32(body[24:])
	if nstages == 0 || nstages > maxStages {
		return nil, fmt.Errorf("%w: stage count %d not in [1, %d]", ErrCorrupt, nstages, maxStages)
	}

	// Validate every descriptor and the total length before allocating,
	// so a hostile header cannot make us allocate what the input does not
	// back. Sizes are summed in uint64: each is at most 2^37 bytes and
	// there are at most 16, so the sum cannot overflow.
	rest := body[headerSize:]
	if uint64(len(rest)) < uint64(nstages)*descriptorSize {
		return nil, fmt.Errorf("%w: %d bytes left for %d stage descriptors", ErrCorrupt, len(rest), nstages)
	}
	type descriptor struct {
		capacity, count, nblocks uint64
		k                        int
	}
	descs := make([]descriptor, nstages)
	var dataBytes, total uint64
	for i := range descs {
		d := rest[i*descriptorSize : (i+1)*descriptorSize]
		capacity := binary.LittleEndian.Uint64(d[0:])
		count := binary.LittleEndian.Uint64(d[8:])
		nblocks := binary.LittleEndian.Uint64(d[16:])
		k := binary.LittleEndian.Uint32(d[24:])
		switch {
		case capacity != planned<<i:
			return nil, fmt.Errorf("%w: stage %d capacity %d, want %d", ErrCorrupt, i, capacity, planned<<i)
		case i < len(descs)-1 && count > capacity:
			// Only the newest stage can pass its capacity, and only
			// once it could not grow.
			return nil, fmt.Errorf("%w: stage %d count %d exceeds capacity %d", ErrCorrupt, i, count, capacity)
		case total+count < total:
			return nil, fmt.Errorf("%w: stage counts overflow", ErrCorrupt)
		case nblocks == 0 || nblocks > maxBlocks:
			return nil, fmt.Errorf("%w: stage %d block count %d not in [1, %d]", ErrCorrupt, i, nblocks, maxBlocks)
		case float64(nblocks)*blockBits < float64(capacity)*max(1, -math.Log2(stageRate(fpRate, i))):
			// No filter stores n keys at rate r in fewer than n*log2(1/r)
			// bits, and New never goes below one bit per key. A stage
			// smaller than that is forged, and trusting its capacity would
			// let a tiny input make the next Add allocate a huge stage.
			return nil, fmt.Errorf("%w: stage %d has %d bits for %d keys at rate %v",
				ErrCorrupt, i, nblocks*blockBits, capacity, stageRate(fpRate, i))
		case k == 0 || k > maxK:
			return nil, fmt.Errorf("%w: stage %d probes per key %d not in [1, %d]", ErrCorrupt, i, k, maxK)
		case binary.LittleEndian.Uint32(d[28:]) != 0:
			return nil, fmt.Errorf("%w: stage %d reserved field not zero", ErrCorrupt, i)
		}
		total += count
		dataBytes += nblocks * blockBytes
		descs[i] = descriptor{capacity: capacity, count: count, nblocks: nblocks, k: int(k)}
	}
	rest = rest[len(descs)*descriptorSize:]
	if dataBytes != uint64(len(rest)) {
		return nil, fmt.Errorf("%w: stages declare %d bytes of bits, encoding holds %d", ErrCorrupt, dataBytes, len(rest))
	}

	stages := make([]*stage, len(descs))
	for i, d := range descs {
		s := newStage(d.capacity, d.nblocks, d.k)
		s.count.Store(d.count)
		for j := range s.blocks {
			for w := range s.blocks[j] {
				s.blocks[j][w].Store(binary.LittleEndian.Uint64(rest))
				rest = rest[8:]
			}
		}
		stages[i] = s
	}
	f := &Filter{}
	f.state.Store(&state{fpRate: fpRate, planned: planned, stages: stages})
	return f, nil
}
