package idemcore_test

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/idemcore"
)

// TestFingerprintIsStable: the encoding is part of every stored mark (its
// Payload), so it must not change: a changed one would answer 422 to the
// retries of every key stored before. The golden value is what idemhttp
// computed before the core was split out of it.
func TestFingerprintIsStable(t *testing.T) {
	f := idemcore.NewFingerprint()
	f.Field("POST")
	f.Field("/pay")
	f.Field("a=1")
	f.Field("Content-Type")
	f.Count(2)
	f.Field("text/plain")
	f.Field("x")
	f.Body([]byte("body"))
	require.Equal(t, "c555d7a4b460197e8b24e94816f34c21592b121addca97b3f77e5688d016222f", hex.EncodeToString(f.Sum()))
}

// TestFingerprintFieldsDoNotRun: moving a byte from one field to the next
// changes the fingerprint (the length prefixes).
func TestFingerprintFieldsDoNotRun(t *testing.T) {
	sum := func(fields ...string) []byte {
		f := idemcore.NewFingerprint()
		for _, s := range fields {
			f.Field(s)
		}
		return f.Sum()
	}
	require.NotEqual(t, sum("ab", "c"), sum("a", "bc"))
	require.NotEqual(t, sum("ab"), sum("a", "b"))
}

// TestStoreKeyHashesTheScope: a fixed-width hashed scope, then the key as
// sent, so no (scope, key) pair is spelt like another.
func TestStoreKeyHashesTheScope(t *testing.T) {
	k := idemcore.StoreKey("alice", "k/1")
	require.Len(t, k, 32+1+3)
	require.Equal(t, "/k/1", k[32:])
	require.NotEqual(t, idemcore.StoreKey("alice/", "k"), idemcore.StoreKey("alice", "/k"))
}
