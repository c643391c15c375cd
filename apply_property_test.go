package oncekv_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// operation is one logical operation of the property tests: a deposit into
// an account, identified by its idempotency key.
type operation struct {
	Handler string
	Key     string
	Account string
	Amount  uint64
}

func (op operation) request() oncekv.Request {
	return oncekv.Request{Handler: op.Handler, Key: op.Key, Payload: fmt.Appendf(nil, "%s:%d", op.Account, op.Amount)}
}

// genOperations draws a set S of distinct logical operations.
func genOperations(t *rapid.T) []operation {
	n := rapid.IntRange(1, 40).Draw(t, "n")
	ops := make([]operation, n)
	for i := range ops {
		ops[i] = operation{
			Handler: rapid.SampledFrom([]string{"deposit", "bonus"}).Draw(t, "handler"),
			Key:     fmt.Sprintf("k%d", i), // distinct per operation, as the article requires
			Account: rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "account"),
			Amount:  rapid.Uint64Range(1, 1000).Draw(t, "amount"),
		}
	}
	return ops
}

// withDuplicates returns S with every element repeated 1-3 times, shuffled:
// an at-least-once delivery of S.
func withDuplicates(t *rapid.T, ops []operation) []operation {
	var deliveries []operation
	for _, op := range ops {
		copies := rapid.IntRange(1, 3).Draw(t, "copies")
		for range copies {
			deliveries = append(deliveries, op)
		}
	}
	return rapid.Permutation(deliveries).Draw(t, "order")
}

// userState dumps every user bucket, for comparing final states.
func userState(t testing.TB, db *oncekv.DB) map[string]string {
	state := map[string]string{}
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		return tx.ForEachBucket(func(name []byte) error {
			return tx.Bucket(name).ForEach(func(k, v []byte) error {
				state[string(name)+"/"+string(k)] = string(v)
				return nil
			})
		})
	}))
	return state
}

// TestPropertyDuplicatesGiveTheSameStateInOrder is f(f(x)) = f(x) at the
// level of the store: applying S once, in order, and applying S with every
// element re-delivered 1-3 times (the first delivery of each keeping its
// place), give the same final state and the same response for every
// delivery of an operation, even though the effect is a non-idempotent
// increment whose response depends on the state it saw.
func TestPropertyDuplicatesGiveTheSameStateInOrder(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ops := genOperations(rt)
		ctx := context.Background()

		once := oncetest.Open(t, &oncekv.Options{NoSync: true})
		want := map[string][]byte{}
		for _, op := range ops {
			res, err := once.Apply(ctx, op.request(), deposit(op.Account, op.Amount))
			require.NoError(rt, err)
			want[op.Handler+"/"+op.Key] = res.Response
		}

		dup := oncetest.Open(t, &oncekv.Options{NoSync: true})
		for i, op := range ops {
			// Before the first delivery of op, re-deliver some earlier ones.
			for _, earlier := range withDuplicates(rt, ops[:i]) {
				if rapid.Bool().Draw(rt, "redeliver") {
					res, err := dup.Apply(ctx, earlier.request(), deposit(earlier.Account, earlier.Amount))
					require.NoError(rt, err)
					require.True(rt, res.Duplicate)
					require.Equal(rt, want[earlier.Handler+"/"+earlier.Key], res.Response)
				}
			}
			for range rapid.IntRange(1, 3).Draw(rt, "copies") {
				res, err := dup.Apply(ctx, op.request(), deposit(op.Account, op.Amount))
				require.NoError(rt, err)
				require.Equal(rt, want[op.Handler+"/"+op.Key], res.Response)
			}
		}
		require.Equal(rt, userState(t, once), userState(t, dup))
	})
}

// TestPropertyDuplicatesGiveTheSameStateConcurrently delivers S with
// duplicates in random order from several goroutines, through Apply and
// ApplyBatch mixed, and checks the final state and every response against
// S applied once. The effect commutes (an increment) and its response
// depends only on the payload, so any order must give the same answer.
func TestPropertyDuplicatesGiveTheSameStateConcurrently(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ops := genOperations(rt)
		ctx := context.Background()
		effect := func(op operation) func(*oncekv.Tx) ([]byte, error) {
			return func(tx *oncekv.Tx) ([]byte, error) {
				if _, err := deposit(op.Account, op.Amount)(tx); err != nil {
					return nil, err
				}
				sum := sha256.Sum256(op.request().Payload)
				return sum[:8], nil
			}
		}

		once := oncetest.Open(t, &oncekv.Options{NoSync: true})
		want := map[string][]byte{}
		for _, op := range ops {
			res, err := once.Apply(ctx, op.request(), effect(op))
			require.NoError(rt, err)
			want[op.Handler+"/"+op.Key] = res.Response
		}

		dup := oncetest.Open(t, &oncekv.Options{NoSync: true})
		deliveries := withDuplicates(rt, ops)
		workers := rapid.IntRange(2, 8).Draw(rt, "workers")
		batch := rapid.IntRange(1, 5).Draw(rt, "batch")
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failures []string
		for w := range workers {
			wg.Go(func() {
				var mine []operation
				for i := w; i < len(deliveries); i += workers {
					mine = append(mine, deliveries[i])
				}
				for len(mine) > 0 {
					n := min(batch, len(mine))
					chunk := mine[:n]
					mine = mine[n:]
					reqs := make([]oncekv.Request, n)
					for i, op := range chunk {
						reqs[i] = op.request()
					}
					results, err := dup.ApplyBatch(ctx, reqs, func(tx *oncekv.Tx, i int) ([]byte, error) { return effect(chunk[i])(tx) })
					mu.Lock()
					if err != nil {
						failures = append(failures, err.Error())
					}
					for i, r := range results {
						if r.Err != nil || string(r.Response) != string(want[chunk[i].Handler+"/"+chunk[i].Key]) {
							failures = append(failures, fmt.Sprintf("%+v: %v %x", chunk[i], r.Err, r.Response))
						}
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.Empty(rt, failures)
		require.Equal(rt, userState(t, once), userState(t, dup))
		st := dup.Stats().Total
		require.Equal(rt, uint64(len(ops)), st.Applied)
		require.Equal(rt, uint64(len(deliveries)-len(ops)), st.DuplicatesSuppressed)
	})
}

// TestRetryStormAppliesEachKeyOnce is the article's retry storm: 16
// goroutines deliver the same 200 increments over and over, and the counter
// must equal the number of distinct keys.
func TestRetryStormAppliesEachKeyOnce(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	const keys, workers, rounds = 200, 16, 3
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				for i := range keys {
					k := (i*7 + w*13 + r*31) % keys
					req := oncekv.Request{Handler: "inc", Key: fmt.Sprintf("evt-%d", k)}
					res, err := db.Apply(ctx, req, deposit("counter", 1))
					if err != nil {
						t.Errorf("apply: %v", err)
						return
					}
					if res.Response == nil {
						t.Errorf("no response for %s", req.Key)
					}
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, uint64(keys), balance(t, db, "counter"))
	st := db.Stats().Total
	require.Equal(t, uint64(keys), st.Applied)
	require.Equal(t, uint64(keys*workers*rounds-keys), st.DuplicatesSuppressed)
}
