package idemcore

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"io"
)

// Fingerprint hashes what makes two requests the same request, for
// oncekv.Request.Payload: each field length-prefixed, so no two sequences
// of fields share an encoding. A transport writes the same fields in the
// same order for every request; changing them changes every fingerprint,
// and the stored keys of the old ones answer 422 until they expire.
type Fingerprint struct {
	h       hash.Hash
	scratch []byte
}

// NewFingerprint starts an empty fingerprint.
func NewFingerprint() *Fingerprint { return &Fingerprint{h: sha256.New()} }

// Field adds s.
func (f *Fingerprint) Field(s string) {
	f.Count(len(s))
	_, _ = io.WriteString(f.h, s)
}

// Count adds a number, such as how many values of a header follow.
func (f *Fingerprint) Count(n int) {
	f.scratch = binary.AppendUvarint(f.scratch[:0], uint64(n))
	f.h.Write(f.scratch)
}

// Body adds the SHA-256 of b, fixed-width.
func (f *Fingerprint) Body(b []byte) {
	sum := sha256.Sum256(b)
	f.h.Write(sum[:])
}

// Sum returns the fingerprint: 32 bytes.
func (f *Fingerprint) Sum() []byte { return f.h.Sum(nil) }

// StoreKey is the oncekv key of a client's key sent by the caller scope.
// The scope goes in hashed: a fixed width keeps every key within bbolt's
// limit whatever the scope's length, and no (scope, key) pair can be spelt
// like another.
func StoreKey(scope, key string) string {
	sum := sha256.Sum256([]byte(scope))
	return hex.EncodeToString(sum[:16]) + "/" + key
}
