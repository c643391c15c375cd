package oncekv

// Done returns a channel that is closed when Close begins. Code built on
// the store that waits between calls (a queue receiver waiting for a
// message, a relay waiting for its next attempt) selects on it next to its
// context, so that closing the store ends the wait instead of leaving it
// blocked on a store that will never wake it. Calls made after it is
// closed return ErrClosed.
func (db *DB) Done() <-chan struct{} { return db.life.closing }
