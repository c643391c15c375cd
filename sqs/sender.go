package sqs

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/oncekv/oncekv/internal/delivery"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
	"github.com/oncekv/oncekv/retry"
)

// SenderOptions configures NewSender. QueueURL is required; a zero field
// of the others takes its default.
type SenderOptions struct {
	// QueueURL receives every message. A URL whose queue name ends in
	// ".fifo" is a FIFO queue (SQS requires the suffix): its sends carry a
	// deduplication id and a group id. Required.
	QueueURL string
	// KeyAttribute names the String message attribute of the idempotency
	// key. Default DefaultKeyAttribute.
	KeyAttribute string
	// FenceAttribute names the Number message attribute of the delivery's
	// fencing token. Default DefaultFenceAttribute.
	FenceAttribute string
	// GroupID is, on a FIFO queue, the MessageGroupId of the messages
	// without an OrderingKey. Default: the message's own deduplication id,
	// a group of one, so such messages are not ordered among themselves
	// and none holds up another.
	GroupID string
	// EncodeBody, if set, turns a message's body into the SQS message body
	// (base64.StdEncoding.EncodeToString, for bytes). Default: the body as
	// it is, which must be text SQS accepts (ErrInvalidBody otherwise).
	EncodeBody func([]byte) string
}

// NewSender returns a relay.Sender that sends each queue message with
// SendMessage to opts.QueueURL through api (an *sqs.Client), and returns
// once SQS accepted it. The message's idempotency key travels in the
// KeyAttribute attribute and the delivery's fencing token in
// FenceAttribute: the key is the same on every retry, takeover and
// redrive, the token new at each. On a FIFO queue the key is also the
// MessageDeduplicationId (DeduplicationID), so a retry within SQS's
// five-minute deduplication interval is dropped by SQS itself, and the
// message's OrderingKey is the MessageGroupId.
//
// A send error is returned as the relay expects: permanent (dead letter,
// its key kept) for a key or body SQS cannot carry, and for SQS's answers
// that no retry fixes (see SendError); retryable otherwise.
//
// Errors: ErrNilArgument; ErrInvalidOptions.
func NewSender(api SendAPI, opts SenderOptions) (relay.Sender, error) {
	if api == nil {
		return nil, fmt.Errorf("%w: api is required", ErrNilArgument)
	}
	o := opts
	o.KeyAttribute = cmp.Or(o.KeyAttribute, DefaultKeyAttribute)
	o.FenceAttribute = cmp.Or(o.FenceAttribute, DefaultFenceAttribute)
	var errs []error
	if o.QueueURL == "" {
		errs = append(errs, errors.New("option QueueURL is required"))
	}
	for _, name := range []string{o.KeyAttribute, o.FenceAttribute} {
		if !validAttributeName(name) {
			errs = append(errs, fmt.Errorf("attribute name %q: 1 to 256 of A-Z a-z 0-9 _ - . (no AWS or Amazon prefix)", name))
		}
	}
	if o.KeyAttribute == o.FenceAttribute {
		errs = append(errs, fmt.Errorf("option KeyAttribute and FenceAttribute are both %q", o.KeyAttribute))
	}
	if o.GroupID != "" && !validID(o.GroupID) {
		errs = append(errs, fmt.Errorf("option GroupID %q: 1 to 128 of letters, digits and punctuation", delivery.Clip(o.GroupID)))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	fifo := strings.HasSuffix(o.QueueURL, ".fifo")
	return func(ctx context.Context, m *queue.Message) error {
		if m == nil || !validText(m.Key) {
			return retry.Permanent(fmt.Errorf("%w: %q", ErrInvalidKey, delivery.Clip(keyOf(m))))
		}
		body := string(m.Body)
		if o.EncodeBody != nil {
			body = o.EncodeBody(m.Body)
		}
		if !validText(body) {
			return retry.Permanent(fmt.Errorf("%w: message %q", ErrInvalidBody, delivery.Clip(m.Key)))
		}
		in := &sqs.SendMessageInput{
			QueueUrl:    aws.String(o.QueueURL),
			MessageBody: aws.String(body),
			MessageAttributes: map[string]types.MessageAttributeValue{
				o.KeyAttribute:   {DataType: aws.String("String"), StringValue: aws.String(m.Key)},
				o.FenceAttribute: {DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatUint(m.Token, 10))},
			},
		}
		if fifo {
			id := DeduplicationID(m.Key)
			group := cmp.Or(o.GroupID, id)
			if m.OrderingKey != "" {
				group = DeduplicationID(m.OrderingKey)
			}
			in.MessageDeduplicationId, in.MessageGroupId = aws.String(id), aws.String(group)
		}
		_, err := api.SendMessage(ctx, in)
		return SendError(err)
	}, nil
}

func keyOf(m *queue.Message) string {
	if m == nil {
		return ""
	}
	return m.Key
}

// DeduplicationID returns the MessageDeduplicationId (or MessageGroupId)
// NewSender uses for key: key itself when SQS accepts it (1 to 128
// letters, digits and punctuation), else the hex SHA-256 of key (64
// characters), the same for every send of it.
func DeduplicationID(key string) string {
	if validID(key) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// validID reports whether s can be a MessageDeduplicationId or a
// MessageGroupId: 1 to 128 of a-z A-Z 0-9 and ASCII punctuation.
func validID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := range len(s) {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// validText reports whether s is non-empty text SQS accepts in a body or
// attribute value: valid UTF-8 of #x9, #xA, #xD, #x20 to #xD7FF, #xE000 to
// #xFFFD and #x10000 to #x10FFFF.
func validText(s string) bool {
	if s == "" || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !(r == 0x9 || r == 0xA || r == 0xD || r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF) {
			return false
		}
	}
	return true
}

// validAttributeName reports whether SQS accepts name as a message
// attribute's.
func validAttributeName(name string) bool {
	if name == "" || len(name) > 256 || name[0] == '.' || name[len(name)-1] == '.' || strings.Contains(name, "..") {
		return false
	}
	lower := strings.ToLower(name)
	if strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.") {
		return false
	}
	for i := range len(name) {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// permanentCodes are SQS error codes no retry of the same send fixes.
var permanentCodes = map[string]bool{
	"InvalidMessageContents": true, "InvalidParameterValue": true, "InvalidAttributeName": true,
	"InvalidAttributeValue": true, "MissingParameter": true, "UnsupportedOperation": true,
	"InvalidSecurity": true, "AccessDenied": true, "AccessDeniedException": true,
	"KmsAccessDenied": true, "KmsDisabled": true, "KmsInvalidKeyUsage": true, "KmsInvalidState": true,
	"KmsNotFound": true, "KmsOptInRequired": true, "InvalidAddress": true, "MessageTooLong": true,
}

// throttleCodes are client-fault codes that a later retry can get past.
var throttleCodes = map[string]bool{
	"RequestThrottled": true, "ThrottlingException": true, "KmsThrottled": true, "OverLimit": true,
	"AWS.SimpleQueueService.RequestThrottled": true,
}

// SendError classifies err, the error of one SendMessage, for a relay:
// nil stays nil; an SQS answer whose code no retry fixes (an invalid
// parameter or attribute, a message too long, access denied, a KMS key
// that cannot be used) is returned marked retry.Permanent; throttling,
// server faults, a queue that does not exist (yet), network errors and
// timeouts are returned as they are, to be retried. errors.Is and
// errors.As still reach the cause.
func SendError(err error) error {
	if err == nil {
		return nil
	}
	err = fmt.Errorf("oncekv: sqs: send: %w", err)
	var api smithy.APIError
	if errors.As(err, &api) && !throttleCodes[api.ErrorCode()] && permanentCodes[api.ErrorCode()] {
		return retry.Permanent(err)
	}
	return err
}
