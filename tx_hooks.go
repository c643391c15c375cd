package oncekv

import "time"

// OnCommit registers fn to run once the transaction has committed, after
// the store's write lock is released, in the goroutine that called Update,
// Apply, ApplyBatch or Claim.Complete, before that call returns. Hooks run
// in the order they were registered. fn never runs when the transaction
// rolls back (an error, a panic, a failed commit), nor when Apply's group
// commit rolls back an attempt and runs the effect again: only the hooks of
// the attempt that committed run, once each.
//
// A panic in fn is the caller's panic: it propagates out of Update (or
// Apply) after the commit, and the hooks after it do not run. fn may call
// any DB method.
//
// A read-only transaction never commits, so in View a hook never runs; a
// nil fn, or one registered after the transaction ended, is ignored.
func (tx *Tx) OnCommit(fn func()) {
	if fn == nil || tx.life.Ended() || tx.w == nil {
		return
	}
	tx.w.onCommit(fn)
}

// Now returns the store's clock (Options.Now, never going backwards) as
// this transaction sees it: in a write transaction one reading taken when
// it began, the time its marks, leases and windows use; in a read-only
// transaction a fresh reading.
func (tx *Tx) Now() time.Time {
	if tx.w != nil {
		return tx.w.now
	}
	if tx.db != nil {
		return tx.db.clock.read()
	}
	return time.Time{}
}

// onCommit attributes fn to the op whose effect is running, if any, so the
// hook runs in that op's caller; otherwise to the transaction's own caller.
func (w *writeTx) onCommit(fn func()) {
	if w.owner != nil {
		w.owner.hooks = append(w.owner.hooks, fn)
		return
	}
	w.hooks = append(w.hooks, fn)
}

// runHooks runs the hooks of a committed transaction, in order. Its caller
// holds no lock, so a hook may panic or call back into the store.
func runHooks(hooks []func()) {
	for _, fn := range hooks {
		fn()
	}
}
