package sqs

import (
	"errors"
	"fmt"

	"github.com/oncekv/oncekv/internal/delivery"
)

// Errors about bad input. Nothing is received, sent or deleted when
// NewConsumer or NewSender returns one.
var (
	// ErrNilArgument: a nil *oncekv.DB, API client or effect was given.
	ErrNilArgument = errors.New("oncekv: sqs: nil argument")
	// ErrInvalidOptions: Options or SenderOptions that cannot work; the
	// message lists every bad field.
	ErrInvalidOptions = errors.New("oncekv: sqs: invalid options")
	// ErrRunning: Run was called while an earlier Run of the same
	// Consumer had not returned.
	ErrRunning = errors.New("oncekv: sqs: already running")
)

// Errors about one message. A consumer's come wrapped in a *MessageError
// and leave the message to the queue's redrive policy; a sender's are
// marked permanent, so the relay dead-letters the message.
var (
	// ErrNoKey: the key function found no idempotency key in the message
	// (the named attribute is missing or empty). Without a key it cannot be
	// deduplicated, so it is never applied.
	ErrNoKey = errors.New("oncekv: sqs: message has no idempotency key")
	// ErrInvalidKey: a queue message whose key cannot travel as an SQS
	// message attribute (empty, or characters SQS refuses).
	ErrInvalidKey = errors.New("oncekv: sqs: invalid message key")
	// ErrInvalidBody: a queue message whose body SQS cannot carry as it is
	// (not UTF-8, or characters outside what SQS allows); set
	// SenderOptions.EncodeBody to send bytes.
	ErrInvalidBody = errors.New("oncekv: sqs: body is not valid SQS text")
)

// MessageError is the error of one message that the consumer could not
// apply: the message's id and key, and the cause (ErrNoKey, or the store's
// error: oncekv.ErrKeyTooLarge, oncekv.ErrKeyReuse, a *oncekv.FailedError,
// an effect's error). errors.Is and errors.As reach the cause.
type MessageError struct {
	MessageID string
	Key       string
	Err       error
}

// Error implements error.
func (e *MessageError) Error() string {
	return fmt.Sprintf("oncekv: sqs: message %s (key %q): %v", e.MessageID, delivery.Clip(e.Key), e.Err)
}

// Unwrap returns the cause.
func (e *MessageError) Unwrap() error { return e.Err }
