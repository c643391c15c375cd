package oncekv_test

import (
	"context"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// TestFingerprintReplacesPayloadHash: a producer re-encodes the same JSON
// with its fields in another order. Compared by payload bytes that is key
// reuse; with the caller's Fingerprint of the content it is a duplicate.
func TestFingerprintReplacesPayloadHash(t *testing.T) {
	db, _ := openClocked(t)
	ctx := context.Background()
	first := []byte(`{"order":7,"amount":100}`)
	reordered := []byte(`{"amount":100,"order":7}`)
	content := sha256.Sum256([]byte("order=7;amount=100")) // the fields that matter, canonical

	// Without a fingerprint the bytes decide: the re-encoding is key reuse.
	_, err := db.Apply(ctx, oncekv.Request{Handler: "pay", Key: "p-1", Payload: first}, nil)
	require.NoError(t, err)
	_, err = db.Apply(ctx, oncekv.Request{Handler: "pay", Key: "p-1", Payload: reordered}, mustNotApply(t))
	require.ErrorIs(t, err, oncekv.ErrKeyReuse)

	// With one, it is a duplicate, for Apply and Claim alike.
	req := oncekv.Request{Handler: "pay", Key: "p-2", Payload: first, Fingerprint: content[:]}
	_, err = db.Apply(ctx, req, func(*oncekv.Tx) ([]byte, error) { return []byte("paid"), nil })
	require.NoError(t, err)
	req.Payload = reordered
	res, err := db.Apply(ctx, req, mustNotApply(t))
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, "paid", string(res.Response))
	c, err := db.Claim(ctx, req, lease)
	require.NoError(t, err)
	require.True(t, c.Done())

	// Another fingerprint is another operation: key reuse.
	other := sha256.Sum256([]byte("order=7;amount=200"))
	req.Fingerprint = other[:]
	_, err = db.Apply(ctx, req, mustNotApply(t))
	require.ErrorIs(t, err, oncekv.ErrKeyReuse)
	// So is a delivery without one, even with the first payload's bytes.
	_, err = db.Apply(ctx, oncekv.Request{Handler: "pay", Key: "p-2", Payload: first}, mustNotApply(t))
	require.ErrorIs(t, err, oncekv.ErrKeyReuse)

	info, err := db.Mark("pay", "p-2")
	require.NoError(t, err)
	require.NotEqual(t, sha256.Sum256(first), info.Fingerprint)
	require.NotEqual(t, content, info.Fingerprint, "hashed apart from payload hashes")
}

func TestFingerprintLength(t *testing.T) {
	db, _ := openClocked(t)
	ctx := context.Background()
	long := oncekv.Request{Handler: "pay", Key: "p-3", Payload: []byte("x"), Fingerprint: []byte(strings.Repeat("f", oncekv.MaxFingerprintSize+1))}
	_, err := db.Apply(ctx, long, mustNotApply(t))
	require.ErrorIs(t, err, oncekv.ErrInvalidFingerprint)
	require.Contains(t, err.Error(), "65 bytes")
	_, err = db.Claim(ctx, long, lease)
	require.ErrorIs(t, err, oncekv.ErrInvalidFingerprint)
	_, err = db.Mark("pay", "p-3")
	require.ErrorIs(t, err, oncekv.ErrNotFound, "nothing was recorded")

	long.Fingerprint = long.Fingerprint[:oncekv.MaxFingerprintSize]
	_, err = db.Apply(ctx, long, nil)
	require.NoError(t, err, "the limit itself is fine")
}
