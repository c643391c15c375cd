package rabbitmq

import (
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// returns matches a link's basic.returns to the Sends that wait for their
// confirms. RabbitMQ sends the return of an unroutable mandatory publish
// before its ack, and amqp091-go hands the return to the watcher (an
// unbuffered send) before it reads the ack; but the Send woken by the ack
// could look before the watcher has recorded what it received. So a Send
// asks the watcher itself (wait): the watcher answers only between two
// returns, after the one it received is recorded.
type returns struct {
	mu       sync.Mutex
	expected map[string]int // ids of the publishes waiting for a confirm, and how many of each
	got      map[string]*ReturnedError
	queries  chan query
	done     <-chan struct{} // closed when the watcher has stopped
	header   string          // the fence header's name
}

type query struct {
	id    string
	reply chan *ReturnedError
}

// returnID is what identifies a publish in its return: the message's key
// and fencing token, which differ between any two deliveries of the relay.
func returnID(key, fence string) string { return fence + "/" + key }

func newReturns(done <-chan struct{}, fenceHeader string) *returns {
	return &returns{
		expected: make(map[string]int),
		got:      make(map[string]*ReturnedError),
		queries:  make(chan query),
		done:     done,
		header:   fenceHeader,
	}
}

// expect registers a publish about to be made: only the returns of
// expected publishes are kept, so got is bounded by the Sends in flight.
func (r *returns) expect(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expected[id]++
}

// forget unregisters a publish once its Send is done with it.
func (r *returns) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.expected[id]--; r.expected[id] <= 0 {
		delete(r.expected, id)
		delete(r.got, id)
	}
}

// returned records one return; the watcher calls it.
func (r *returns) returned(ret amqp.Return) {
	fence, _ := ret.Headers[r.header].(string)
	id := returnID(ret.MessageId, fence)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.expected[id] > 0 {
		r.got[id] = &ReturnedError{Code: ret.ReplyCode, Text: ret.ReplyText, Exchange: ret.Exchange, RoutingKey: ret.RoutingKey}
	}
}

// take removes and returns the return recorded for id, if any.
func (r *returns) take(id string) *ReturnedError {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.got[id]
	delete(r.got, id)
	return e
}

// wait returns the return of publish id, once every return received
// before the caller's confirm has been recorded.
func (r *returns) wait(id string) (*ReturnedError, bool) {
	q := query{id: id, reply: make(chan *ReturnedError, 1)}
	var e *ReturnedError
	select {
	case r.queries <- q:
		e = <-q.reply
	case <-r.done: // the watcher recorded every return before it stopped
		e = r.take(id)
	}
	return e, e != nil
}
