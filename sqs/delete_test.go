package sqs_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	oncesqs "github.com/oncekv/oncekv/sqs"
)

// flakyDeletes wraps the real client on goaws. goaws never reports a
// failed entry of DeleteMessageBatch (an unknown receipt handle is left
// out of both lists), so this small fake makes the first delete of the
// message with body fail the way SQS reports it: in Failed, with
// SenderFault as given, without deleting it.
type flakyDeletes struct {
	*sqs.Client
	mu          sync.Mutex
	body        string
	senderFault bool
	failed      bool
	handles     map[string]string // receipt handle -> body, of received messages
}

func (f *flakyDeletes) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := f.Client.ReceiveMessage(ctx, in, opts...)
	if err == nil {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, m := range out.Messages {
			f.handles[aws.ToString(m.ReceiptHandle)] = aws.ToString(m.Body)
		}
	}
	return out, err
}

func (f *flakyDeletes) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	f.mu.Lock()
	var keep []types.DeleteMessageBatchRequestEntry
	var failed []types.BatchResultErrorEntry
	for _, e := range in.Entries {
		if !f.failed && f.handles[aws.ToString(e.ReceiptHandle)] == f.body {
			f.failed = true
			failed = append(failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError"), SenderFault: f.senderFault})
			continue
		}
		keep = append(keep, e)
	}
	f.mu.Unlock()
	out := &sqs.DeleteMessageBatchOutput{}
	if len(keep) > 0 {
		real, err := f.Client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: in.QueueUrl, Entries: keep}, opts...)
		if err != nil {
			return nil, err
		}
		out.Successful = real.Successful
	}
	out.Failed = failed
	return out, nil
}

// TestDeletePartialFailures: a batch entry that failed on SQS's side is
// deleted on a second try; one that failed through the sender's fault is
// not retried, the message comes back when its visibility ends and is
// suppressed as a duplicate, then deleted; and a stale receipt handle,
// which goaws leaves out of both lists (with the real goaws), is counted
// as a failure too. Each key is applied once.
func TestDeletePartialFailures(t *testing.T) {
	for _, tc := range []struct {
		name        string
		senderFault bool
	}{{"server fault retried", false}, {"sender fault left to come back", true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := client(server(t))
			url, _ := newQueue(t, c, time.Second, 0, false)
			ks := []string{"a", "b", "c"}
			for _, k := range ks {
				send(t, c, url, k)
			}
			api := &flakyDeletes{Client: c, body: "v-b", senderFault: tc.senderFault, handles: make(map[string]string)}
			db := openDB(t)
			cons, err := oncesqs.NewConsumer(db, api, count, oncesqs.Options{Handler: "orders", QueueURL: url,
				Key: oncesqs.AttributeKey(oncesqs.DefaultKeyAttribute), WaitTime: time.Second, Visibility: time.Second, Logger: quiet})
			require.NoError(t, err)
			runUntil(t, cons, 15*time.Second, func() bool { return depth(t, c, url) == 0 })
			requireOnce(t, db, ks)
			s := cons.Stats()
			require.True(t, api.failed)
			if tc.senderFault {
				require.Equal(t, uint64(1), s.DeleteFailures)
				require.Equal(t, uint64(1), s.Duplicates, "b came back")
			} else {
				require.Zero(t, s.DeleteFailures)
				require.Zero(t, s.Duplicates, "b was deleted on the second try")
			}
			require.Equal(t, uint64(3), s.Deleted)
		})
	}
	t.Run("stale receipt handle, real goaws", func(t *testing.T) {
		c := client(server(t))
		url, _ := newQueue(t, c, time.Second, 0, false)
		send(t, c, url, "slow")
		db := openDB(t)
		stalled, release := make(chan struct{}), make(chan struct{})
		first := true
		effect := func(tx *oncekv.Tx, m *types.Message) ([]byte, error) {
			if first {
				first = false
				close(stalled)
				<-release
			}
			return count(tx, m)
		}
		cons, err := oncesqs.NewConsumer(db, noVisibility{c}, effect, oncesqs.Options{Handler: "orders", QueueURL: url,
			Key: oncesqs.AttributeKey(oncesqs.DefaultKeyAttribute), WaitTime: time.Second, Visibility: time.Second, Logger: quiet})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- cons.Run(ctx) }()
		<-stalled
		// The heartbeat fails, so the message is visible again after 1s:
		// another receiver takes it, and the consumer's handle goes stale.
		require.Eventually(t, func() bool {
			out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 1})
			return err == nil && len(out.Messages) == 1
		}, 10*time.Second, 10*time.Millisecond)
		close(release)
		require.Eventually(t, func() bool { return depth(t, c, url) == 0 }, 15*time.Second, 20*time.Millisecond)
		cancel()
		require.NoError(t, <-errc)
		requireOnce(t, db, []string{"slow"})
		s := cons.Stats()
		require.Equal(t, uint64(1), s.DeleteFailures, "the stale handle's delete, in neither list")
		require.Positive(t, s.VisibilityFailures)
		require.Equal(t, uint64(1), s.Duplicates, "it came back and was suppressed")
	})
}

// noVisibility fails every visibility change, as when the heartbeat cannot
// reach SQS.
type noVisibility struct{ *sqs.Client }

func (noVisibility) ChangeMessageVisibility(context.Context, *sqs.ChangeMessageVisibilityInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	return nil, errors.New("connection refused")
}
