package delivery

import (
	"context"

	"github.com/oncekv/oncekv"
)

// Apply applies the deliveries of one batch with one DB.ApplyBatch under
// handler: delivery i's request has the key keys[i] and the payload
// payload(i), and effect(tx, i) is its effect. A delivery whose key is ""
// is left out (the caller gave it its own error) and gets the zero result.
//
// The results are indexed as keys are. The error is ApplyBatch's, non-nil
// only when the batch as a whole failed; the results are then nil unless
// ApplyBatch answered each request too.
func Apply(ctx context.Context, db *oncekv.DB, handler string, keys []string, payload func(i int) []byte,
	effect func(tx *oncekv.Tx, i int) ([]byte, error)) ([]oncekv.BatchResult, error) {
	reqs := make([]oncekv.Request, 0, len(keys))
	idx := make([]int, 0, len(keys)) // reqs[j] is delivery idx[j]
	for i, k := range keys {
		if k == "" {
			continue
		}
		reqs = append(reqs, oncekv.Request{Handler: handler, Key: k, Payload: payload(i)})
		idx = append(idx, i)
	}
	if len(reqs) == 0 {
		return make([]oncekv.BatchResult, len(keys)), nil
	}
	results, err := db.ApplyBatch(ctx, reqs, func(tx *oncekv.Tx, j int) ([]byte, error) {
		return effect(tx, idx[j])
	})
	if results == nil {
		return nil, err
	}
	out := make([]oncekv.BatchResult, len(keys))
	for j, r := range results {
		out[idx[j]] = r
	}
	return out, err
}
