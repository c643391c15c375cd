package delivery

import "sync"

// Running lets one Run of a consumer go at a time. The zero Running is
// idle.
type Running struct {
	mu      sync.Mutex
	running bool
}

// Begin marks the consumer running, or returns busy (the adapter's
// ErrRunning) when an earlier Run has not ended.
func (r *Running) Begin(busy error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running {
		return busy
	}
	r.running = true
	return nil
}

// End marks the consumer idle again.
func (r *Running) End() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running = false
}
