package sqs

import (
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// KeyFunc returns the idempotency key of a received message: the same
// for every delivery of one logical operation. An empty result means the
// message has none (ErrNoKey).
type KeyFunc func(m *types.Message) string

// DefaultKeyAttribute is the message attribute Sender puts the
// idempotency key in, and the one AttributeKey is usually given.
const DefaultKeyAttribute = "Idempotency-Key"

// DefaultFenceAttribute is the message attribute (a Number) Sender puts
// the delivery's fencing token in.
const DefaultFenceAttribute = "Oncekv-Fence"

// AttributeKey returns a KeyFunc reading the string value of the message
// attribute name. Prefer it: a key the producer created once for the
// operation and sent in an attribute (Sender does, under
// DefaultKeyAttribute) is the same on every send of it.
func AttributeKey(name string) KeyFunc {
	return func(m *types.Message) string {
		if v, ok := m.MessageAttributes[name]; ok && v.StringValue != nil {
			return *v.StringValue
		}
		return ""
	}
}

// MessageID is a KeyFunc returning SQS's message id. It deduplicates the
// redeliveries of one send (a consumer that died before its delete, a
// visibility timeout that ran out), but SQS mints a new id for every send:
// a producer that retries a send after a timeout makes a second message
// with a second id, applied again. Use AttributeKey when producers can set
// one.
func MessageID(m *types.Message) string {
	if m.MessageId == nil {
		return ""
	}
	return *m.MessageId
}
