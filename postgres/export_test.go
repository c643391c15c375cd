package postgres

// SetMaxResponseSize lowers the largest response (plus permanent error
// message) a mark of s may hold, so a test reaches the limit without
// allocating a gigabyte.
func SetMaxResponseSize(s *Store, n int) { s.maxResponse = n }

// SetSavepoints makes s undo a failed effect of a batch with a savepoint
// around every effect (true) instead of re-running the batch without it,
// for the benchmark that compares the two.
func SetSavepoints(s *Store, on bool) { s.savepoints = on }
