package bucket

import (
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/fence"
)

// fencesRoot returns the system bucket of fences (see package fence).
func fencesRoot(tx *bolt.Tx) (*bolt.Bucket, error) {
	if b := tx.Bucket(FencesRoot); b != nil {
		return b, nil
	}
	return nil, fmt.Errorf("%w: system bucket %q is missing", ErrCorrupt, FencesRoot)
}

// NextToken issues the next fencing token of resource in a writable
// transaction; see fence.Next.
func NextToken(tx *bolt.Tx, resource []byte) (uint64, error) {
	fences, err := fencesRoot(tx)
	if err != nil {
		return 0, err
	}
	if len(resource) > fence.MaxResourceSize {
		return 0, fmt.Errorf("resource name is %d bytes, over the limit of %d: %w", len(resource), fence.MaxResourceSize, ErrKeyTooLarge)
	}
	n, err := fence.Next(fences, resource)
	return n, fenceError(err)
}

// NextClaimToken issues the next claim token in a writable transaction; see
// fence.NextClaim.
func NextClaimToken(tx *bolt.Tx) (uint64, error) {
	fences, err := fencesRoot(tx)
	if err != nil {
		return 0, err
	}
	n, err := fence.NextClaim(fences)
	return n, fenceError(err)
}

// LastClaimToken returns the last claim token issued, 0 if none was; see
// fence.LastClaim.
func LastClaimToken(tx *bolt.Tx) (uint64, error) {
	fences, err := fencesRoot(tx)
	if err != nil {
		return 0, err
	}
	n, err := fence.LastClaim(fences)
	return n, fenceError(err)
}

// fenceError turns what package fence returns into this package's
// vocabulary: a record that does not decode becomes a *RecordError naming
// the bucket, so it matches ErrCorrupt like every other bad record, and
// bbolt's errors are mapped as everywhere else.
func fenceError(err error) error {
	var re *fence.RecordError
	if errors.As(err, &re) {
		name := string(FencesRoot)
		if re.Bucket != nil {
			name += "/" + string(re.Bucket)
		}
		return &RecordError{Bucket: name, Key: string(re.Key), Err: re.Err}
	}
	return mapBoltErr(err)
}
