package oncekv

import (
	"expvar"
	"fmt"
	"sync"
	"sync/atomic"
)

// published holds the names Publish has given to expvar. expvar can never
// unpublish a name, so this map grows by one entry per distinct name ever
// published, exactly as expvar's own map does; its bound is the caller's
// number of names.
var published struct {
	mu    sync.Mutex
	names map[string]*atomic.Pointer[DB]
}

// Publish makes db's Stats visible through the standard library's expvar
// under name: /debug/vars (when the program serves it) shows a fresh
// snapshot, as JSON, each time it is read. Durations are in nanoseconds, as
// encoding/json writes a time.Duration.
//
// expvar panics when a name is published twice; Publish returns an error
// wrapping ErrPublish instead, naming the name, when another variable
// holds it or another open DB does. A name published for a DB that has since
// been closed is taken over by the new DB, so a program that reopens its
// store (after ErrPoisoned, say) publishes it again under the same name.
// Until then the variable reads as null.
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
