package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
	"github.com/oncekv/oncekv/retry"
)

// SenderOptions configures NewSender. Topic is required; a zero field of
// the others takes its default.
type SenderOptions struct {
	// Topic receives every message. Required.
	Topic string
	// KeyHeader names the header of the idempotency key. Default
	// DefaultKeyHeader.
	KeyHeader string
	// FenceHeader names the header of the delivery's fencing token, in
	// decimal. Default DefaultFenceHeader.
	FenceHeader string
	// KeyByOrderingKey makes a message's OrderingKey, when it has one, the
	// record key instead of its idempotency key, so that the messages of
	// one ordering key land in one partition, in order; the idempotency
	// key then travels in KeyHeader only (consume with HeaderKey).
	// Default false: the record key is the idempotency key.
	KeyByOrderingKey bool
}

// ProducerOpts returns the producer settings the guarantee needs, to pass
// to kgo.NewClient with the seed brokers: acks from all in-sync replicas
// (kgo.RequiredAcks(kgo.AllISRAcks()), franz-go's default) and a delivery
// timeout of two minutes (Kafka's delivery.timeout.ms default) with
// unlimited retries within it. Idempotent writes are franz-go's default
// (enable.idempotence), and NewSender refuses a client that disabled them;
// with them franz-go keeps at most 5 produce requests in flight per broker
// (max.in.flight.requests.per.connection=5) and refuses a setting of its
// own (kgo.MaxProduceRequestsInflightPerBroker). Together: a retry of the
// client's neither duplicates a record in its partition nor reorders it.
func ProducerOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(2 * time.Minute),
	}
}

// NewSender returns a relay.Sender that produces each queue message as one
// record to opts.Topic on cl and returns once the broker acknowledged it
// (acks=all). The record's key is the message's idempotency key (see
// KeyByOrderingKey), its value the body; its headers carry the key
// (KeyHeader) and the delivery's fencing token (FenceHeader): the key is
// the same on every retry, takeover and redrive, the token new at each.
//
// A produce error is returned as the relay expects: permanent (the
// message is dead-lettered, its key kept) when the record itself or the
// topic's access is wrong (MESSAGE_TOO_LARGE, INVALID_RECORD,
// INVALID_TOPIC_EXCEPTION, TOPIC_AUTHORIZATION_FAILED, POLICY_VIOLATION,
// ...), retryable otherwise (a timeout, the broker unavailable, too few
// in-sync replicas, a producer id the broker forgot, the client closed, the
// context ended), since the record may or may not have been written and a
// retry with the same key is deduplicated by the consumer.
//
// Errors: ErrNilArgument; ErrInvalidOptions; ErrClientConfig when cl
// disabled idempotent writes, asks for fewer acks than all, lets in-flight
// records be cancelled (kgo.AllowIdempotentProduceCancellation), or is
// transactional (its records outside a transaction would all fail).
func NewSender(cl *kgo.Client, opts SenderOptions) (relay.Sender, error) {
	if cl == nil {
		return nil, fmt.Errorf("%w: client is required", ErrNilArgument)
	}
	o := opts
	o.KeyHeader = cmp.Or(o.KeyHeader, DefaultKeyHeader)
	o.FenceHeader = cmp.Or(o.FenceHeader, DefaultFenceHeader)
	var errs []error
	if o.Topic == "" {
		errs = append(errs, errors.New("option Topic is required"))
	}
	if o.KeyHeader == o.FenceHeader {
		errs = append(errs, fmt.Errorf("option KeyHeader and FenceHeader are both %q", o.KeyHeader))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	if err := checkProducerClient(cl); err != nil {
		return nil, err
	}
	return func(ctx context.Context, m *queue.Message) error {
		if m == nil || m.Key == "" {
			return retry.Permanent(fmt.Errorf("%w: empty key", ErrInvalidKey))
		}
		rec := &kgo.Record{
			Topic: o.Topic,
			Key:   []byte(m.Key),
			Value: m.Body,
			Headers: []kgo.RecordHeader{
				{Key: o.KeyHeader, Value: []byte(m.Key)},
				{Key: o.FenceHeader, Value: strconv.AppendUint(nil, m.Token, 10)},
			},
		}
		if o.KeyByOrderingKey && m.OrderingKey != "" {
			rec.Key = []byte(m.OrderingKey)
		}
		return ProduceError(o.Topic, cl.ProduceSync(ctx, rec).FirstErr())
	}, nil
}

// checkProducerClient returns ErrClientConfig naming every option of cl
// that breaks the sender's guarantee.
func checkProducerClient(cl *kgo.Client) error {
	var errs []error
	if off, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool); off {
		errs = append(errs, errors.New("kgo.DisableIdempotentWrite() must not be set: without idempotence a retry of the client's can write a record twice or out of order"))
	}
	if acks, ok := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); ok && acks != kgo.AllISRAcks() {
		errs = append(errs, errors.New("kgo.RequiredAcks must be kgo.AllISRAcks(): a record acknowledged by fewer replicas is lost with its leader"))
	}
	if cancel, _ := cl.OptValue(kgo.AllowIdempotentProduceCancellation).(bool); cancel {
		errs = append(errs, errors.New("kgo.AllowIdempotentProduceCancellation() must not be set: a cancelled in-flight record may be written all the same, and its retry again"))
	}
	if id, _ := cl.OptValue(kgo.TransactionalID).(string); id != "" {
		errs = append(errs, errors.New("kgo.TransactionalID must not be set: a transactional client fails every record produced outside a transaction"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrClientConfig, errors.Join(errs...))
	}
	return nil
}

// permanentProduce lists the broker errors no retry of the same record can
// fix: the record or the topic's access is wrong. Producer-session errors
// (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID, ...) are not here: a
// retry on a new session can succeed.
var permanentProduce = []*kerr.Error{
	kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord,
	kerr.InvalidTopicException, kerr.InvalidTimestamp, kerr.UnsupportedForMessageFormat,
	kerr.PolicyViolation, kerr.InvalidRequiredAcks,
	kerr.TopicAuthorizationFailed, kerr.ClusterAuthorizationFailed, kerr.TransactionalIDAuthorizationFailed,
}

// ProduceError classifies err, the error of producing one record to topic,
// for a relay: nil stays nil; a broker error in the permanent list above is
// returned marked retry.Permanent; anything else (a retriable broker
// error, kgo.ErrRecordTimeout, kgo.ErrRecordRetries, kgo.ErrClientClosed,
// a context's error) is returned as it is, to be retried. errors.Is still
// reaches the cause.
func ProduceError(topic string, err error) error {
	if err == nil {
		return nil
	}
	err = fmt.Errorf("oncekv: kafka: produce to %s: %w", topic, err)
	for _, p := range permanentProduce {
		if errors.Is(err, p) {
			return retry.Permanent(err)
		}
	}
	return err
}
