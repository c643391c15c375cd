package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// TestProtocol runs every peer (PostgreSQL only with
// ONCEKV_BENCH_PG_DSN set) through the protocol: a first delivery applies
// the effect and returns the response, a duplicate returns the stored
// response without applying it again, another payload under the key is
// rejected, and the batch form does the same.
func TestProtocol(t *testing.T) {
	cfg := &config{payload: 32, response: 16, batch: 4, clients: 2}
	for _, p := range allPeers {
		t.Run(p.name, func(t *testing.T) {
			sc := storeConfig{dir: t.TempDir(), sync: true, bloom: true, span: time.Hour,
				retention: time.Hour, pgDSN: os.Getenv("ONCEKV_BENCH_PG_DSN")}
			s, err := p.open(sc)
			if errors.Is(err, errNoDSN) {
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := s.close(); err != nil {
					t.Error(err)
				}
			}()
			ctx := context.Background()
			reqs := requests("t", 3, cfg)
			first := s.apply(ctx, &reqs[0])
			if first.err != nil || first.duplicate || !bytes.Equal(first.response, reqs[0].response) {
				t.Fatalf("first delivery: %+v", first)
			}
			if !p.dedup {
				return // a floor: nothing more to check
			}
			dup := s.apply(ctx, &reqs[0])
			if dup.err != nil || !dup.duplicate || !bytes.Equal(dup.response, reqs[0].response) {
				t.Fatalf("duplicate: %+v", dup)
			}
			other := reqs[0]
			other.payload = []byte("another payload")
			if o := s.apply(ctx, &other); !errors.Is(o.err, errKeyReuse) {
				t.Fatalf("other payload: %+v, want errKeyReuse", o)
			}
			wantEffects(t, s, reqs[0].key, 1)

			bs, ok := s.(batcher)
			if !ok {
				return
			}
			// A new key, its duplicate in the same batch, and a stored key.
			out, err := bs.applyBatch(ctx, []request{reqs[1], reqs[1], reqs[0], other})
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []bool{false, true, true} {
				if out[i].err != nil || out[i].duplicate != want {
					t.Errorf("batch[%d] = %+v, want duplicate %v", i, out[i], want)
				}
			}
			if !errors.Is(out[3].err, errKeyReuse) {
				t.Errorf("batch[3] = %+v, want errKeyReuse", out[3])
			}
			wantEffects(t, s, reqs[1].key, 1)
		})
	}
}

func wantEffects(t *testing.T, s store, key string, want uint64) {
	t.Helper()
	if n, err := s.effectCount(key); err != nil || n != want {
		t.Fatalf("effect of %s applied %d times (err %v), want %d", key, n, err, want)
	}
}

// TestSuiteSmoke runs the whole harness on a tiny workload.
func TestSuiteSmoke(t *testing.T) {
	cfg, err := parseFlags([]string{"-keys", "20", "-fast-keys", "50", "-size-keys", "100", "-runs", "1",
		"-batch", "10", "-clients", "2", "-growth", "100,200", "-dup", "0.5", "-out", t.TempDir(),
		"-tmp", t.TempDir(), "-peers", "disk,bbolt,oncekv,sqlite-full,badger"})
	if err != nil {
		t.Fatal(err)
	}
	if err := runSuite(cfg); err != nil {
		t.Fatal(err)
	}
}
