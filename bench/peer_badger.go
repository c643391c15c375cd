package main

import (
	"context"
	"errors"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// badgerStore keeps marks under "m/handler\x00key" with a TTL of the dedup
// window, and effects under "e/key", in one transaction.
type badgerStore struct {
	db  *badger.DB
	ttl time.Duration
}

func openBadger(c storeConfig) (store, error) {
	opts := badger.DefaultOptions(c.dir).
		WithSyncWrites(c.sync).
		WithLogger(nil).
		WithNumVersionsToKeep(1)
	db, err := badger.Open(opts)
	if err != nil {
		return nil, err
	}
	return &badgerStore{db: db, ttl: c.retention}, nil
}

func badgerMarkKey(r *request) []byte   { return []byte("m/" + r.handler + "\x00" + r.key) }
func badgerEffectKey(key string) []byte { return []byte("e/" + key) }

// lookup answers r from its mark in txn; ok is false when there is none.
func (s *badgerStore) lookup(txn *badger.Txn, r *request) (o outcome, ok bool) {
	item, err := txn.Get(badgerMarkKey(r))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return outcome{}, false
	}
	if err == nil {
		err = item.Value(func(v []byte) error {
			m, err := decodeMark(v)
			if err == nil {
				o = decide(r, m.state, m.hash, m.response)
			}
			return err
		})
	}
	if err != nil {
		return outcome{err: err}, true
	}
	return o, true
}

// write applies r in txn: the effect, then the DONE mark with its TTL.
func (s *badgerStore) write(txn *badger.Txn, r *request) (outcome, error) {
	if o, ok := s.lookup(txn, r); ok {
		return o, nil
	}
	ek := badgerEffectKey(r.key)
	var prev []byte
	item, err := txn.Get(ek)
	switch {
	case err == nil:
		if prev, err = item.ValueCopy(nil); err != nil {
			return outcome{}, err
		}
	case !errors.Is(err, badger.ErrKeyNotFound):
		return outcome{}, err
	}
	if err := txn.Set(ek, nextEffect(prev, r.payload)); err != nil {
		return outcome{}, err
	}
	m := doneMark(r)
	e := badger.NewEntry(badgerMarkKey(r), m.encode()).WithTTL(s.ttl)
	return outcome{response: r.response}, txn.SetEntry(e)
}

// update runs fn in a write transaction, again on a conflict with a
// concurrent one (Badger's optimistic concurrency).
func (s *badgerStore) update(fn func(txn *badger.Txn) error) error {
	for {
		err := s.db.Update(fn)
		if !errors.Is(err, badger.ErrConflict) {
			return err
		}
	}
}

func (s *badgerStore) apply(_ context.Context, r *request) outcome {
	var o outcome
	var found bool
	// The duplicate path: a read transaction.
	if err := s.db.View(func(txn *badger.Txn) error {
		o, found = s.lookup(txn, r)
		return nil
	}); err != nil {
		return outcome{err: err}
	}
	if found {
		return o
	}
	err := s.update(func(txn *badger.Txn) (err error) {
		o, err = s.write(txn, r)
		return err
	})
	if err != nil {
		return outcome{err: err}
	}
	return o
}

func (s *badgerStore) applyBatch(_ context.Context, rs []request) (out []outcome, err error) {
	err = s.update(func(txn *badger.Txn) error {
		out, err = applyEach(rs, func(r *request) (outcome, error) { return s.write(txn, r) })
		return err
	})
	return out, err
}

func (s *badgerStore) effectCount(key string) (n uint64, err error) {
	err = s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(badgerEffectKey(key))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error { n = effectCountOf(v); return nil })
	})
	return n, err
}

func (s *badgerStore) close() error { return s.db.Close() }
