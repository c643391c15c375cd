package oncekv

import (
	"fmt"
	"runtime/debug"
)

// recoverCorrupt turns a panic inside bbolt while reading a damaged file
// into ErrCorrupt.
func recoverCorrupt(path string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("oncekv: %q: %w (bbolt: %v)", path, ErrCorrupt, r)
	}
}

// guard runs fn, a bbolt transaction, and turns a panic that bbolt raises
// on a damaged page (an assertion such as "page expected to be", an index
// out of range, or a fault reading past the end of the memory map) into
// ErrCorrupt, so that a damaged file gives its readers an error and not a
// crash. A panic of the caller's own code inside the transaction is marked
// by callUser and raised again unchanged. bbolt rolls the transaction back
// on the way out, so nothing stays locked.
func (db *DB) guard(fn func() error) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if up, ok := r.(userPanic); ok {
			panic(up.val)
		}
		err = fmt.Errorf("oncekv: %q: %w (bbolt: %v)", db.path, ErrCorrupt, r)
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return fn()
}

// userPanic carries a panic of the caller's code through guard.
type userPanic struct{ val any }

// callUser runs fn, the caller's code, so that guard re-raises its panic
// instead of taking it for bbolt's. A bbolt panic inside fn (the caller
// reading a damaged page of a user bucket) stays a panic too: it happened
// in the caller's code, which may hold locks of its own.
func callUser(fn func() error) error {
	defer func() {
		if r := recover(); r != nil {
			panic(userPanic{r})
		}
	}()
	return fn()
}
