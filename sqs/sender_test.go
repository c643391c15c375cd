package sqs_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
	"github.com/oncekv/oncekv/retry"
	oncesqs "github.com/oncekv/oncekv/sqs"
)

// TestSenderRelaysTheOutbox: a relay delivers a queue to goaws through the
// Sender; each SQS message carries the body, the key in Idempotency-Key
// and the fencing token (a Number) in Oncekv-Fence, and the Consumer reads
// the key back with AttributeKey.
func TestSenderRelaysTheOutbox(t *testing.T) {
	c := client(server(t))
	url, _ := newQueue(t, c, 5*time.Second, 0, false)
	db := openDB(t)
	q, err := queue.Open(db, "outbox", nil)
	require.NoError(t, err)
	defer q.Close()
	ctx := context.Background()
	_, err = q.Enqueue(ctx, queue.Message{Key: "order-1", Body: []byte("2 apples")})
	require.NoError(t, err)
	send, err := oncesqs.NewSender(c, oncesqs.SenderOptions{QueueURL: url})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(rctx, q, send, nil) }()
	var out *sqs.ReceiveMessageOutput
	require.Eventually(t, func() bool {
		out, err = c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MessageAttributeNames: []string{"All"}})
		return err == nil && len(out.Messages) == 1
	}, 10*time.Second, 20*time.Millisecond)
	stop()
	require.NoError(t, <-done)
	m := &out.Messages[0]
	require.Equal(t, "2 apples", aws.ToString(m.Body))
	require.Equal(t, "order-1", oncesqs.AttributeKey(oncesqs.DefaultKeyAttribute)(m))
	fence := m.MessageAttributes[oncesqs.DefaultFenceAttribute]
	require.Equal(t, "Number", aws.ToString(fence.DataType))
	tok, err := strconv.ParseUint(aws.ToString(fence.StringValue), 10, 64)
	require.NoError(t, err)
	require.Positive(t, tok)
}

// recordSends keeps each SendMessage input it forwards: goaws does not
// hand back a FIFO message's deduplication or group id, so the test
// reads them here.
type recordSends struct {
	*sqs.Client
	ins []*sqs.SendMessageInput
}

func (r *recordSends) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	r.ins = append(r.ins, in)
	return r.Client.SendMessage(ctx, in, opts...)
}

// TestSenderFIFODeduplication: on a FIFO queue a send retried with the
// same key is dropped by the queue itself (goaws keeps FIFO deduplication
// while the first copy is in the queue); the key is the
// MessageDeduplicationId (hashed when SQS would refuse it), and the
// ordering key the MessageGroupId.
func TestSenderFIFODeduplication(t *testing.T) {
	c := client(server(t))
	url, _ := newQueue(t, c, 5*time.Second, 0, true)
	api := &recordSends{Client: c}
	send, err := oncesqs.NewSender(api, oncesqs.SenderOptions{QueueURL: url})
	require.NoError(t, err)
	ctx := context.Background()
	m := &queue.Message{Key: "order-1", Body: []byte("2 apples"), OrderingKey: "customer-7", Token: 1}
	require.NoError(t, send(ctx, m))
	m.Token = 2 // a takeover's retry: a new token, the same key
	require.NoError(t, send(ctx, m))
	long := strings.Repeat("é", 100)
	require.NoError(t, send(ctx, &queue.Message{Key: long, Body: []byte("x"), Token: 3}))
	require.Equal(t, 2, depth(t, c, url), "the retry was dropped by the FIFO queue")

	require.Equal(t, "order-1", aws.ToString(api.ins[0].MessageDeduplicationId))
	require.Equal(t, "customer-7", aws.ToString(api.ins[0].MessageGroupId))
	id := aws.ToString(api.ins[2].MessageDeduplicationId)
	require.Equal(t, oncesqs.DeduplicationID(long), id)
	require.Len(t, id, 64, "a key SQS refuses as an id is hashed")
	require.Equal(t, id, aws.ToString(api.ins[2].MessageGroupId), "no ordering key: a group of one")
}

// fakeSQSError answers every send with one SQS error, as SQS would.
type fakeSQSError struct{ err error }

func (f fakeSQSError) SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return nil, f.err
}

// TestSenderClassifiesErrors: a key or body SQS cannot carry is permanent
// and nothing is sent; goaws's answer to a body over the queue's maximum
// (InvalidMessageContents) is permanent, its answer for a queue that does
// not exist is retried; an invalid parameter is permanent, throttling and
// server faults are retried.
func TestSenderClassifiesErrors(t *testing.T) {
	c := client(server(t))
	url, _ := newQueue(t, c, 5*time.Second, 0, false)
	ctx := context.Background()
	send, err := oncesqs.NewSender(c, oncesqs.SenderOptions{QueueURL: url})
	require.NoError(t, err)
	for _, m := range []*queue.Message{{Key: "", Body: []byte("x")}, {Key: "bad\x00key", Body: []byte("x")}} {
		err := send(ctx, m)
		require.ErrorIs(t, err, oncesqs.ErrInvalidKey)
		require.True(t, retry.IsPermanent(err))
	}
	err = send(ctx, &queue.Message{Key: "k", Body: []byte{0xff, 0x00}})
	require.ErrorIs(t, err, oncesqs.ErrInvalidBody)
	require.True(t, retry.IsPermanent(err))
	require.Zero(t, depth(t, c, url), "nothing sent")

	err = send(ctx, &queue.Message{Key: "k", Body: []byte(strings.Repeat("x", 300<<10))})
	require.Error(t, err)
	require.True(t, retry.IsPermanent(err), "%v", err)
	missing, err := oncesqs.NewSender(c, oncesqs.SenderOptions{QueueURL: server(t) + "/100010001000/no-such-queue"})
	require.NoError(t, err)
	err = missing(ctx, &queue.Message{Key: "k", Body: []byte("x")})
	require.Error(t, err)
	require.False(t, retry.IsPermanent(err), "%v", err)

	for code, permanent := range map[string]bool{"InvalidParameterValue": true, "KmsAccessDenied": true, "RequestThrottled": false, "InternalError": false} {
		s, err := oncesqs.NewSender(fakeSQSError{&smithy.GenericAPIError{Code: code, Fault: smithy.FaultClient}}, oncesqs.SenderOptions{QueueURL: url})
		require.NoError(t, err)
		err = s(ctx, &queue.Message{Key: "k", Body: []byte("x")})
		var api smithy.APIError
		require.ErrorAs(t, err, &api)
		require.Equal(t, permanent, retry.IsPermanent(err), code)
	}
}

// TestNewSenderRejectsBadOptions names every bad field.
func TestNewSenderRejectsBadOptions(t *testing.T) {
	_, err := oncesqs.NewSender(nil, oncesqs.SenderOptions{QueueURL: "u"})
	require.ErrorIs(t, err, oncesqs.ErrNilArgument)
	_, err = oncesqs.NewSender(client(server(t)), oncesqs.SenderOptions{KeyAttribute: "AWS.key", FenceAttribute: "a b", GroupID: strings.Repeat("g", 200)})
	require.ErrorIs(t, err, oncesqs.ErrInvalidOptions)
	for _, s := range []string{"QueueURL", "AWS.key", `"a b"`, "GroupID"} {
		require.ErrorContains(t, err, s)
	}
}
