package rabbitmq

import (
	"errors"
	"fmt"
)

// Errors of NewConsumer, NewPublisher and Run, before anything reaches the
// broker or the store.
var (
	// ErrInvalidOptions is returned by NewConsumer and NewPublisher for
	// options they cannot run with; the error names every bad field.
	ErrInvalidOptions = errors.New("oncekv: rabbitmq: invalid options")
	// ErrRunning is returned by Run while another Run of the same
	// Consumer is running.
	ErrRunning = errors.New("oncekv: rabbitmq: consumer already running")
)

// Errors of one delivery or one publish. Those that no retry can fix are
// wrapped with oncekv.Permanent, so oncekv.Classify and the relay give up
// on them (a dead letter) instead of retrying forever.
var (
	// ErrNoKey: a delivery carries no usable idempotency key (no
	// message_id, or the named header is missing, empty or not a string).
	// Permanent: the consumer dead-letters the delivery.
	ErrNoKey = errors.New("oncekv: rabbitmq: delivery has no idempotency key")
	// ErrKeyTooLong: a message's key is longer than the 255 bytes an AMQP
	// message_id can hold. Permanent: the Publisher sends nothing.
	ErrKeyTooLong = errors.New("oncekv: rabbitmq: idempotency key longer than 255 bytes")
	// ErrNacked: the broker refused the publish (basic.nack), or the
	// channel closed before it confirmed it. Transient: the publish may or
	// may not have been kept, so the relay sends it again, and the
	// consumer's store deduplicates by message_id.
	ErrNacked = errors.New("oncekv: rabbitmq: publish not confirmed by the broker")
	// ErrReturned: the broker could not route a mandatory publish to any
	// queue (see ReturnedError). Transient: a binding may appear later;
	// the relay's policy dead-letters it after its attempts.
	ErrReturned = errors.New("oncekv: rabbitmq: publish returned unroutable")
	// ErrBlocked: the broker has blocked publishing on the connection (a
	// memory or disk alarm). Transient: the Publisher fails at once rather
	// than write into a socket the broker stopped reading.
	ErrBlocked = errors.New("oncekv: rabbitmq: broker blocked publishing")
	// ErrClosed is returned by Send after Close. Transient, so that a
	// message a closing relay still sends is kept, not dead-lettered.
	ErrClosed = errors.New("oncekv: rabbitmq: publisher closed")
)

// ReturnedError is the broker's basic.return of a mandatory publish: the
// reply code (312 NO_ROUTE) and text, the exchange and the routing key.
// It matches ErrReturned.
type ReturnedError struct {
	Code       uint16
	Text       string
	Exchange   string
	RoutingKey string
}

// Error says what was returned and why.
func (e *ReturnedError) Error() string {
	return fmt.Sprintf("%v: exchange %q, routing key %q: %d %s", ErrReturned, e.Exchange, e.RoutingKey, e.Code, e.Text)
}

// Unwrap returns ErrReturned.
func (e *ReturnedError) Unwrap() error { return ErrReturned }
