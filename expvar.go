package oncekv

import (
	"expvar"
	"fmt"
	"sync"
	"sync/atomic"
)

// published holds the names Publish gave expvar, which can never unpublish
// one: bounded by the caller's number of names, as expvar's own map is.
var published struct {
	mu    sync.Mutex
	names map[string]*atomic.Pointer[DB]
}

// Publish makes db's Stats visible through expvar under name: each read of
// /debug/vars shows a fresh snapshot, durations in nanoseconds. A name held
// by another variable or another open DB returns an error wrapping
// ErrPublish instead of expvar's panic; a name of a DB since closed is
// taken over, so a reopened store publishes again under it (the variable
// reads null meanwhile).
func Publish(name string, db *DB) error {
	if name == "" {
		return fmt.Errorf("%w: empty name", ErrPublish)
	}
	if db == nil {
		return fmt.Errorf("%w: nil DB for name %q", ErrPublish, name)
	}
	published.mu.Lock()
	defer published.mu.Unlock()
	if cur, ok := published.names[name]; ok {
		if old := cur.Load(); old != db && old.isOpen() {
			return fmt.Errorf("%w: name %q is held by the DB on %q, still open", ErrPublish, name, old.path)
		}
		cur.Store(db)
		return nil
	}
	cur := new(atomic.Pointer[DB])
	cur.Store(db)
	if err := publishVar(name, expvar.Func(func() any {
		db := cur.Load()
		if !db.isOpen() {
			return nil
		}
		return db.Stats()
	})); err != nil {
		return err
	}
	if published.names == nil {
		published.names = map[string]*atomic.Pointer[DB]{}
	}
	published.names[name] = cur
	return nil
}

// publishVar is expvar.Publish with its panic on a name taken turned into
// an error. The look-up first keeps expvar from logging the panic in the
// common case; the recover covers other code publishing the same name
// between the two.
func publishVar(name string, v expvar.Var) (err error) {
	taken := fmt.Errorf("%w: name %q is held by another variable", ErrPublish, name)
	if expvar.Get(name) != nil {
		return taken
	}
	defer func() {
		if recover() != nil {
			err = taken
		}
	}()
	expvar.Publish(name, v)
	return nil
}
