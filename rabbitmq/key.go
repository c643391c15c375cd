package rabbitmq

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/oncekv/oncekv"
)

// KeyOf returns the idempotency key of d: its message_id when header is
// empty, else the value of that header, which must be a non-empty string
// (or bytes). The producer sets it once per logical message, and every
// retry and redelivery carries the same one; RabbitMQ's delivery tag and
// the Redelivered flag are no keys (the tag is per channel, and a producer
// that published twice makes two deliveries neither of which is marked
// redelivered).
//
// Errors: ErrNoKey, wrapped with oncekv.Permanent, naming what is missing.
func KeyOf(d *amqp.Delivery, header string) (string, error) {
	if header == "" {
		if d.MessageId == "" {
			return "", oncekv.Permanent(fmt.Errorf("%w: message_id is empty", ErrNoKey))
		}
		return d.MessageId, nil
	}
	v, ok := d.Headers[header]
	if !ok {
		return "", oncekv.Permanent(fmt.Errorf("%w: no header %q", ErrNoKey, header))
	}
	var k string
	switch v := v.(type) {
	case string:
		k = v
	case []byte:
		k = string(v)
	default:
		return "", oncekv.Permanent(fmt.Errorf("%w: header %q holds a %T, want a string", ErrNoKey, header, v))
	}
	if k == "" {
		return "", oncekv.Permanent(fmt.Errorf("%w: header %q is empty", ErrNoKey, header))
	}
	return k, nil
}
