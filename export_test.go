package oncekv

// SetFilterHook lets the external tests play the adversary with the Bloom
// filters: hook sees every answer ("maybe" or "definitely not") and returns
// the one the store acts on. A hook must never turn "maybe" into "no"; that
// would be a false negative by construction, not a test of the store. Set it
// right after Open, before any other call.
func SetFilterHook(db *DB, hook func(maybe bool) bool) {
	db.filterHook = func(maybe bool) bool { return maybe || hook(maybe) }
}
