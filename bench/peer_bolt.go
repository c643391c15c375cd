package main

import (
	"context"
	"errors"
	"path/filepath"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
)

var effectsBucket = []byte("effects")

// boltStore is raw bbolt writing the effect only: no mark, no dedup. It is
// the floor that oncekv's cost is measured against, opened the way oncekv
// opens its file.
type boltStore struct{ db *bolt.DB }

func openBbolt(c storeConfig) (store, error) {
	db, err := bolt.Open(filepath.Join(c.dir, "bolt.db"), 0o600, &bolt.Options{
		NoSync:       !c.sync,
		FreelistType: bolt.FreelistMapType,
	})
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(effectsBucket)
		return err
	})
	if err != nil {
		return nil, errors.Join(err, db.Close())
	}
	return &boltStore{db}, nil
}

func (s *boltStore) put(tx *bolt.Tx, r *request) outcome {
	b := tx.Bucket(effectsBucket)
	k := []byte(r.key)
	if err := b.Put(k, nextEffect(b.Get(k), r.payload)); err != nil {
		return outcome{err: err}
	}
	return outcome{response: r.response}
}

func (s *boltStore) apply(_ context.Context, r *request) outcome {
	var o outcome
	err := s.db.Update(func(tx *bolt.Tx) error {
		o = s.put(tx, r)
		return o.err
	})
	if err != nil {
		return outcome{err: err}
	}
	return o
}

func (s *boltStore) applyBatch(_ context.Context, rs []request) (out []outcome, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		out, err = applyEach(rs, func(r *request) (outcome, error) {
			o := s.put(tx, r)
			return o, o.err
		})
		return err
	})
	return out, err
}

func (s *boltStore) effectCount(key string) (n uint64, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		n = effectCountOf(tx.Bucket(effectsBucket).Get([]byte(key)))
		return nil
	})
	return n, err
}

func (s *boltStore) close() error { return s.db.Close() }

// oncekvStore is oncekv's Apply, and ApplyBatch as its batch form.
type oncekvStore struct{ db *oncekv.DB }

func openOncekv(bloom bool) func(c storeConfig) (store, error) {
	return func(c storeConfig) (store, error) {
		o := &oncekv.Options{
			NoSync:         !c.sync,
			WindowSpan:     c.span,
			Retention:      c.retention,
			ExpireInterval: -1, // nothing expires within a run
			Now:            c.now,
		}
		if !bloom || !c.bloom {
			o.BloomFalsePositiveRate = -1
		}
		db, err := oncekv.Open(filepath.Join(c.dir, "oncekv.db"), o)
		if err != nil {
			return nil, err
		}
		return &oncekvStore{db}, nil
	}
}

// openOncekvDB opens the oncekv peer as the cells do, for the cells that
// call oncekv's API beyond the protocol (LoadMarks, PutFenced).
func openOncekvDB(c storeConfig) (*oncekv.DB, error) {
	s, err := openOncekv(true)(c)
	if err != nil {
		return nil, err
	}
	return s.(*oncekvStore).db, nil
}

// effect is the effect the protocol asks for: one 64-byte value write in a
// user bucket.
func oncekvEffect(tx *oncekv.Tx, r *request) ([]byte, error) {
	b, err := tx.CreateBucketIfNotExists(effectsBucket)
	if err != nil {
		return nil, err
	}
	k := []byte(r.key)
	return r.response, b.Put(k, nextEffect(b.Get(k), r.payload))
}

func oncekvRequest(r *request) oncekv.Request {
	return oncekv.Request{Handler: r.handler, Key: r.key, Payload: r.payload}
}

func oncekvOutcome(res oncekv.Result, err error) outcome {
	if errors.Is(err, oncekv.ErrKeyReuse) {
		err = errKeyReuse
	} else if errors.Is(err, oncekv.ErrInProgress) {
		err = errInProgress
	}
	return outcome{response: res.Response, duplicate: res.Duplicate, err: err}
}

func (s *oncekvStore) apply(ctx context.Context, r *request) outcome {
	return oncekvOutcome(s.db.Apply(ctx, oncekvRequest(r), func(tx *oncekv.Tx) ([]byte, error) {
		return oncekvEffect(tx, r)
	}))
}

func (s *oncekvStore) applyBatch(ctx context.Context, rs []request) ([]outcome, error) {
	return oncekvOutcomes(s.db.ApplyBatch(ctx, oncekvRequests(rs), func(tx *oncekv.Tx, i int) ([]byte, error) {
		return oncekvEffect(tx, &rs[i])
	}))
}

// oncekvRequests are rs as oncekv's requests, for an ApplyBatch.
func oncekvRequests(rs []request) []oncekv.Request {
	reqs := make([]oncekv.Request, len(rs))
	for i := range rs {
		reqs[i] = oncekvRequest(&rs[i])
	}
	return reqs
}

// oncekvOutcomes are the outcomes of an ApplyBatch's results.
func oncekvOutcomes(res []oncekv.BatchResult, err error) ([]outcome, error) {
	if err != nil {
		return nil, err
	}
	out := make([]outcome, len(res))
	for i, r := range res {
		out[i] = oncekvOutcome(r.Result, r.Err)
	}
	return out, nil
}

func (s *oncekvStore) effectCount(key string) (n uint64, err error) {
	err = s.db.View(func(tx *oncekv.Tx) error {
		if b := tx.Bucket(effectsBucket); b != nil {
			n = effectCountOf(b.Get([]byte(key)))
		}
		return nil
	})
	return n, err
}

func (s *oncekvStore) close() error { return s.db.Close() }

func (s *oncekvStore) commitCounts() commitCounts {
	st := s.db.Stats()
	h := st.CommitHistograms
	return commitCounts{commits: h.Count, took: h.DurationSum, markTxs: h.MarkCommits, marks: h.RequestSum,
		freelist: st.File.FreelistBytes, pageSize: st.File.PageSize, liveMarks: st.LiveMarks, windowsNow: len(st.Windows)}
}
