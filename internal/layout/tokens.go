package layout

import (
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/fencestore"
)

// fencesRoot returns the system bucket of fences (see internal/fencestore).
func fencesRoot(tx *bolt.Tx) (*bolt.Bucket, error) {
	if b := tx.Bucket(FencesRoot); b != nil {
		return b, nil
	}
	return nil, fmt.Errorf("%w: system bucket %q is missing", base.ErrCorrupt, FencesRoot)
}

// NextToken issues the next fencing token of resource in a writable
// transaction; see fencestore.Next.
func NextToken(tx *bolt.Tx, resource []byte) (uint64, error) {
	root, err := fencesRoot(tx)
	if err != nil {
		return 0, err
	}
	if len(resource) > fencestore.MaxResourceSize {
		return 0, fmt.Errorf("resource name is %d bytes, over the limit of %d: %w", len(resource), fencestore.MaxResourceSize, base.ErrKeyTooLarge)
	}
	n, err := fencestore.Next(root, resource)
	return n, base.FenceError(err)
}

// NextClaimToken issues the next claim token in a writable transaction; see
// fencestore.NextClaim.
func NextClaimToken(tx *bolt.Tx) (uint64, error) {
	root, err := fencesRoot(tx)
	if err != nil {
		return 0, err
	}
	n, err := fencestore.NextClaim(root)
	return n, base.FenceError(err)
}

// LastClaimToken returns the last claim token issued, 0 if none was; see
// fencestore.LastClaim.
func LastClaimToken(tx *bolt.Tx) (uint64, error) {
	root, err := fencesRoot(tx)
	if err != nil {
		return 0, err
	}
	n, err := fencestore.LastClaim(root)
	return n, base.FenceError(err)
}
