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

// guard runs fn, a bbolt transaction, turning a panic of bbolt's on a
// damaged page (or a fault past the end of its memory map) into ErrCorrupt,
// and raising a panic of the caller's code (see callUser) again unchanged
// (docs/design/damaged-files.md).
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

// callUser runs fn, the caller's code, so that guard raises its panic
// again, a bbolt panic in it included: it may hold the caller's own locks.
func callUser(fn func() error) error {
	defer func() {
		if r := recover(); r != nil {
			panic(userPanic{r})
		}
	}()
	return fn()
}
