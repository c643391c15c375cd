package sqs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/retry"
	oncesqs "github.com/oncekv/oncekv/sqs"
)

// TestConsumerDeletesAfterCommit sends messages a quarter of which are
// sent twice (a producer's retry: a new message id, the same key
// attribute) and requires each key applied once, the second copies
// suppressed and counted, and every message deleted.
func TestConsumerDeletesAfterCommit(t *testing.T) {
	c := client(server(t))
	url, _ := newQueue(t, c, 5*time.Second, 0, false)
	ks := keys(60)
	sent := 0
	for i, k := range ks {
		send(t, c, url, k)
		sent++
		if i%4 == 0 {
			send(t, c, url, k)
			sent++
		}
	}
	db := openDB(t)
	cons, err := oncesqs.NewConsumer(db, c, count, oncesqs.Options{Handler: "orders", QueueURL: url,
		Key: oncesqs.AttributeKey(oncesqs.DefaultKeyAttribute), WaitTime: time.Second, Visibility: 5 * time.Second, Logger: quiet})
	require.NoError(t, err)
	runUntil(t, cons, 20*time.Second, func() bool { return depth(t, c, url) == 0 })
	requireOnce(t, db, ks)
	s := cons.Stats()
	require.Equal(t, uint64(15), s.Duplicates)
	require.Equal(t, uint64(60), s.Applied)
	require.Equal(t, uint64(sent), s.Deleted)
}

// TestHeartbeatKeepsALongBatchInvisible: a batch that takes three times
// the queue's visibility timeout keeps its message invisible (another
// receiver sees nothing meanwhile) through the heartbeat, and the message
// is applied once and deleted; the heartbeat has stopped when Run
// returns.
func TestHeartbeatKeepsALongBatchInvisible(t *testing.T) {
	c := client(server(t))
	url, _ := newQueue(t, c, time.Second, 0, false)
	send(t, c, url, "slow")
	db := openDB(t)
	started, release := make(chan struct{}), make(chan struct{})
	slow := func(tx *oncekv.Tx, m *types.Message) ([]byte, error) {
		close(started)
		<-release
		return count(tx, m)
	}
	cons, err := oncesqs.NewConsumer(db, c, slow, oncesqs.Options{Handler: "orders", QueueURL: url,
		Key: oncesqs.AttributeKey(oncesqs.DefaultKeyAttribute), WaitTime: time.Second, Visibility: time.Second,
		Heartbeat: 300 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- cons.Run(ctx) }()
	<-started
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 1})
		require.NoError(t, err)
		require.Empty(t, out.Messages, "the message became visible while its batch ran")
	}
	close(release)
	require.Eventually(t, func() bool { return depth(t, c, url) == 0 }, 10*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, <-errc)
	requireOnce(t, db, []string{"slow"})
	s := cons.Stats()
	require.GreaterOrEqual(t, s.VisibilityChanges, uint64(5), "extended about every 300ms for 3s")
	require.Zero(t, s.VisibilityFailures)
	require.Equal(t, uint64(1), s.Deleted)
}

// TestPermanentFailureLeftToRedrive: a message whose effect fails
// permanently, and one without a key, are not deleted; after the queue's
// maxReceiveCount receives goaws moves them to the dead-letter queue, with
// their key attribute. The poison effect ran once: later receives were
// answered from its recorded failure. The good message is applied once.
func TestPermanentFailureLeftToRedrive(t *testing.T) {
	c := client(server(t))
	url, dlq := newQueue(t, c, time.Second, 2, false)
	send(t, c, url, "poison")
	send(t, c, url, "good")
	_, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("no key")})
	require.NoError(t, err)
	db := openDB(t)
	runs := 0
	effect := func(tx *oncekv.Tx, m *types.Message) ([]byte, error) {
		if aws.ToString(m.Body) == "v-poison" {
			runs++
			return nil, oncekv.Permanent(errors.New("cannot parse"))
		}
		return count(tx, m)
	}
	var gaveUp []error
	cons, err := oncesqs.NewConsumer(db, c, effect, oncesqs.Options{Handler: "orders", QueueURL: url,
		Key: oncesqs.AttributeKey(oncesqs.DefaultKeyAttribute), WaitTime: time.Second, Visibility: time.Second, Logger: quiet,
		OnBatch: func(outs []oncesqs.Outcome) {
			for _, o := range outs {
				if o.Verdict == oncesqs.GaveUp {
					gaveUp = append(gaveUp, o.Err)
				}
			}
		}})
	require.NoError(t, err)
	runUntil(t, cons, 20*time.Second, func() bool { return depth(t, c, url) == 0 && depth(t, c, dlq) == 2 })
	requireOnce(t, db, []string{"good"})
	require.Equal(t, 1, runs, "the poison effect ran once; redeliveries replay its failure")
	require.GreaterOrEqual(t, len(gaveUp), 4, "each of two receives of each")
	var fe *oncekv.FailedError
	noKey := 0
	for _, err := range gaveUp {
		var me *oncesqs.MessageError
		require.ErrorAs(t, err, &me)
		if errors.Is(err, oncesqs.ErrNoKey) {
			noKey++
		} else {
			require.ErrorAs(t, err, &fe)
		}
	}
	require.Positive(t, noKey)
	out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(dlq), MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"}})
	require.NoError(t, err)
	var keys []string
	for i := range out.Messages {
		keys = append(keys, oncesqs.AttributeKey(oncesqs.DefaultKeyAttribute)(&out.Messages[i]))
	}
	require.ElementsMatch(t, []string{"poison", ""}, keys, "the dead letters keep their key")
}

// TestTransientFailureComesBackAfterBackoff: an effect error a retry can
// fix sets the message's visibility to the retry policy's backoff (here
// under a second, not the queue's 30s), and the message is applied once
// when it comes back.
func TestTransientFailureComesBackAfterBackoff(t *testing.T) {
	c := client(server(t))
	url, _ := newQueue(t, c, 30*time.Second, 0, false)
	send(t, c, url, "flaky")
	db := openDB(t)
	fails := 2
	effect := func(tx *oncekv.Tx, m *types.Message) ([]byte, error) {
		if fails > 0 {
			fails--
			return nil, errors.New("upstream timeout")
		}
		return count(tx, m)
	}
	cons, err := oncesqs.NewConsumer(db, c, effect, oncesqs.Options{Handler: "orders", QueueURL: url,
		Key: oncesqs.AttributeKey(oncesqs.DefaultKeyAttribute), WaitTime: time.Second, Logger: quiet,
		Retry: &retry.Policy{Base: 100 * time.Millisecond, Cap: time.Second}})
	require.NoError(t, err)
	start := time.Now()
	runUntil(t, cons, 15*time.Second, func() bool { return depth(t, c, url) == 0 })
	require.Less(t, time.Since(start), 15*time.Second)
	requireOnce(t, db, []string{"flaky"})
	s := cons.Stats()
	require.Equal(t, uint64(2), s.Retries)
	require.Equal(t, uint64(1), s.Applied)
}

// TestNewConsumerRejectsBadInput: nil arguments and options SQS or the
// heartbeat cannot work with are refused with typed errors naming each
// field; an oversized key is given up on with the store's typed error.
func TestNewConsumerRejectsBadInput(t *testing.T) {
	c := client(server(t))
	db := openDB(t)
	opts := oncesqs.Options{Handler: "h", QueueURL: "u", Key: oncesqs.MessageID}
	_, err := oncesqs.NewConsumer(nil, c, count, opts)
	require.ErrorIs(t, err, oncesqs.ErrNilArgument)
	_, err = oncesqs.NewConsumer(db, nil, count, opts)
	require.ErrorIs(t, err, oncesqs.ErrNilArgument)
	_, err = oncesqs.NewConsumer(db, c, nil, opts)
	require.ErrorIs(t, err, oncesqs.ErrNilArgument)
	_, err = oncesqs.NewConsumer(db, c, count, oncesqs.Options{MaxMessages: 11, WaitTime: 1500 * time.Millisecond,
		Visibility: 2 * time.Second, Heartbeat: 3 * time.Second, Retry: &retry.Policy{Base: -1}})
	require.ErrorIs(t, err, oncesqs.ErrInvalidOptions)
	for _, field := range []string{"Handler", "QueueURL", "Key", "MaxMessages", "WaitTime", "Heartbeat", "Retry"} {
		require.ErrorContains(t, err, field)
	}

	url, _ := newQueue(t, c, 5*time.Second, 0, false)
	send(t, c, url, strings.Repeat("k", 40000))
	var got []oncesqs.Outcome
	cons, err := oncesqs.NewConsumer(db, c, count, oncesqs.Options{Handler: "h", QueueURL: url,
		Key: oncesqs.AttributeKey(oncesqs.DefaultKeyAttribute), WaitTime: time.Second, Logger: quiet,
		OnBatch: func(outs []oncesqs.Outcome) { got = append(got, outs...) }})
	require.NoError(t, err)
	runUntil(t, cons, 10*time.Second, func() bool { return cons.Stats().GaveUp > 0 })
	require.ErrorIs(t, got[0].Err, oncekv.ErrKeyTooLarge)
	require.Less(t, len(got[0].Err.Error()), 400, "the error quotes a bounded part of the key")
}

// TestMessageIDKeyMissesAProducersRetry shows the caveat of MessageID:
// SQS mints a message id per send, so a producer that sends one operation
// twice makes two ids, and a consumer keyed by MessageID applies it twice;
// keyed by the Idempotency-Key attribute it applies it once.
func TestMessageIDKeyMissesAProducersRetry(t *testing.T) {
	c := client(server(t))
	for _, tc := range []struct {
		name string
		key  oncesqs.KeyFunc
		want uint64 // applications of the one operation
	}{{"MessageID", oncesqs.MessageID, 2}, {"AttributeKey", oncesqs.AttributeKey(oncesqs.DefaultKeyAttribute), 1}} {
		t.Run(tc.name, func(t *testing.T) {
			url, _ := newQueue(t, c, 5*time.Second, 0, false)
			send(t, c, url, "order-1")
			send(t, c, url, "order-1") // the producer's retry after a timeout
			db := openDB(t)
			cons, err := oncesqs.NewConsumer(db, c, count, oncesqs.Options{Handler: "orders", QueueURL: url,
				Key: tc.key, WaitTime: time.Second, Logger: quiet})
			require.NoError(t, err)
			runUntil(t, cons, 10*time.Second, func() bool { return depth(t, c, url) == 0 })
			require.Equal(t, tc.want, cons.Stats().Applied)
		})
	}
}
