package oncekv_test

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/conformance"
)

// TestConformance runs the suite both stores pass (internal/conformance)
// against the embedded store.
func TestConformance(t *testing.T) {
	conformance.Run(t, &conformance.Harness{
		Kind: conformance.Embedded,
		Open: func(t *testing.T, cfg conformance.Config) conformance.Store {
			path := filepath.Join(t.TempDir(), "conformance.db")
			db, err := oncekv.Open(path, embeddedOptions(cfg))
			require.NoError(t, err)
			return &embedded{db: db, path: path}
		},
		Reopen: func(t *testing.T, s conformance.Store, cfg conformance.Config) (conformance.Store, error) {
			e := s.(*embedded)
			require.NoError(t, e.db.Close())
			db, err := oncekv.Open(e.path, embeddedOptions(cfg))
			if err != nil {
				return nil, err
			}
			return &embedded{db: db, path: e.path}, nil
		},
		LimitResponse: func(s conformance.Store, n int) { oncekv.SetMaxResponseSize(s.(*embedded).db, n) },
	})
}

func embeddedOptions(cfg conformance.Config) *oncekv.Options {
	return &oncekv.Options{
		Retention: cfg.Retention, WindowSpan: cfg.WindowSpan, Now: cfg.Now, TombstoneRetention: cfg.TombstoneRetention,
		ExpireInterval: -1, MaxClockJump: -1, NoSync: true,
	}
}

// embedded is the conformance suite's view of a DB: counters in the
// bucket "counters", fenced values in the bucket "fenced".
type embedded struct {
	db   *oncekv.DB
	path string
}

var (
	countersBucket = []byte("counters")
	fencedBucket   = []byte("fenced")
)

// effect turns the suite's Effect into the DB's.
func effect(e *conformance.Effect) func(tx *oncekv.Tx) ([]byte, error) {
	if e == nil {
		return nil
	}
	return func(tx *oncekv.Tx) ([]byte, error) {
		if e.Counter != "" {
			b, err := tx.CreateBucketIfNotExists(countersBucket)
			if err != nil {
				return nil, err
			}
			var n uint64
			if v := b.Get([]byte(e.Counter)); v != nil {
				n = binary.BigEndian.Uint64(v)
			}
			if err := b.Put([]byte(e.Counter), binary.BigEndian.AppendUint64(nil, n+1)); err != nil {
				return nil, err
			}
		}
		if e.Hook != nil {
			e.Hook()
		}
		return e.Response, e.Err
	}
}

func (s *embedded) Apply(ctx context.Context, req oncekv.Request, e *conformance.Effect) (oncekv.Result, error) {
	return s.db.Apply(ctx, req, effect(e))
}

func (s *embedded) ApplyBatch(ctx context.Context, reqs []oncekv.Request, e func(i int) *conformance.Effect) ([]oncekv.BatchResult, error) {
	return s.db.ApplyBatch(ctx, reqs, func(tx *oncekv.Tx, i int) ([]byte, error) {
		if fn := effect(e(i)); fn != nil {
			return fn(tx)
		}
		return nil, nil
	})
}

func (s *embedded) Claim(ctx context.Context, req oncekv.Request, lease time.Duration) (conformance.Claim, error) {
	c, err := s.db.Claim(ctx, req, lease)
	if err != nil {
		return nil, err
	}
	return embeddedClaim{c}, nil
}

func (s *embedded) ClaimWith(ctx context.Context, req oncekv.Request, lease time.Duration, opts *oncekv.ClaimOptions) (conformance.Claim, error) {
	c, err := s.db.ClaimWith(ctx, req, lease, opts)
	if err != nil {
		return nil, err
	}
	return embeddedClaim{c}, nil
}

func (s *embedded) Parked(context.Context) (marks []oncekv.MarkInfo, err error) {
	err = s.db.Parked(func(m oncekv.MarkInfo) error {
		marks = append(marks, m)
		return nil
	})
	return marks, err
}

func (s *embedded) ResolveParked(_ context.Context, handler, key string, applied bool, response []byte) error {
	return s.db.ResolveParked(handler, key, applied, response)
}

func (s *embedded) NextFence(_ context.Context, resource string) (uint64, error) {
	return s.db.NextFence(resource)
}

func (s *embedded) FencedWrite(_ context.Context, resource string, fence uint64, value string) error {
	return s.db.Update(func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(fencedBucket)
		if err != nil {
			return err
		}
		return b.PutFenced([]byte(resource), []byte(value), fence)
	})
}

func (s *embedded) Value(_ context.Context, resource string) (v string, err error) {
	err = s.db.View(func(tx *oncekv.Tx) error {
		if b := tx.Bucket(fencedBucket); b != nil {
			v = string(b.Get([]byte(resource)))
		}
		return nil
	})
	return v, err
}

func (s *embedded) Count(_ context.Context, counter string) (n int, err error) {
	err = s.db.View(func(tx *oncekv.Tx) error {
		if b := tx.Bucket(countersBucket); b != nil {
			if v := b.Get([]byte(counter)); v != nil {
				n = int(binary.BigEndian.Uint64(v))
			}
		}
		return nil
	})
	return n, err
}

func (s *embedded) Expire(ctx context.Context) (oncekv.ExpireStats, error) { return s.db.Expire(ctx) }
func (s *embedded) Now() time.Time                                         { return s.db.Now() }
func (s *embedded) Close() error                                           { return s.db.Close() }

type embeddedClaim struct{ *oncekv.Claim }

func (c embeddedClaim) Complete(ctx context.Context, response []byte, e *conformance.Effect) (oncekv.Result, error) {
	var fn func(tx *oncekv.Tx) error
	if eff := effect(e); eff != nil {
		fn = func(tx *oncekv.Tx) error {
			_, err := eff(tx)
			return err
		}
	}
	return c.Claim.Complete(ctx, response, fn)
}
