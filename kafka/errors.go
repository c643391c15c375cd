package kafka

import (
	"errors"
	"fmt"

	"github.com/oncekv/oncekv/internal/delivery"
)

// Errors about bad input. Nothing is consumed, produced or committed when
// NewConsumer or NewSender returns one.
var (
	// ErrNilArgument: a nil *oncekv.DB, *kgo.Client, effect or key
	// function was given.
	ErrNilArgument = errors.New("oncekv: kafka: nil argument")
	// ErrInvalidOptions: Options or SenderOptions that cannot work; the
	// message lists every bad field.
	ErrInvalidOptions = errors.New("oncekv: kafka: invalid options")
	// ErrClientConfig: the *kgo.Client is configured in a way that breaks
	// the guarantee (auto-commit on, no consumer group, rebalances not
	// blocked while a poll is processed; or, for a producer, idempotence
	// off, acks below all, cancellable in-flight records); the message
	// names every such option and the one to use instead.
	ErrClientConfig = errors.New("oncekv: kafka: client configuration breaks the guarantee")
	// ErrRunning: Run was called while an earlier Run of the same
	// Consumer had not returned.
	ErrRunning = errors.New("oncekv: kafka: already running")
)

// Errors about one record or message. They come wrapped in a *RecordError
// (consumer) or marked permanent (sender), so that the record is given up
// on (Options.DeadLetter) and the message dead-lettered, instead of being
// retried forever.
var (
	// ErrNoKey: the key function found no idempotency key in the record
	// (an empty header or record key). Without a key the record cannot be
	// deduplicated, so it is never applied.
	ErrNoKey = errors.New("oncekv: kafka: record has no idempotency key")
	// ErrEarlierFailed: the record was not applied because an earlier
	// record of its partition failed in the same poll in a way a retry can
	// fix; both are polled again, in order.
	ErrEarlierFailed = errors.New("oncekv: kafka: an earlier record of the partition failed")
	// ErrInvalidKey: a queue message whose key cannot travel as a record
	// key and header (empty).
	ErrInvalidKey = errors.New("oncekv: kafka: invalid message key")
)

// RecordError is the error of one record that the consumer could not
// apply: the record's coordinates and key, and the cause (ErrNoKey, or the
// store's error: oncekv.ErrKeyTooLarge, oncekv.ErrKeyReuse, a
// *oncekv.FailedError, an effect's error). errors.Is and errors.As reach
// the cause.
type RecordError struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       string
	Err       error
}

// Error implements error.
func (e *RecordError) Error() string {
	return fmt.Sprintf("oncekv: kafka: record %s/%d@%d (key %q): %v", e.Topic, e.Partition, e.Offset, delivery.Clip(e.Key), e.Err)
}

// Unwrap returns the cause.
func (e *RecordError) Unwrap() error { return e.Err }
