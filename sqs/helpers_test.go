package sqs_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Admiral-Piett/goaws/app"
	"github.com/Admiral-Piett/goaws/app/gosqs"
	"github.com/Admiral-Piett/goaws/app/router"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/schemas"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/transport/http/protocol/awsquery"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/applycount"
	"github.com/oncekv/oncekv/internal/oncetest"
	oncesqs "github.com/oncekv/oncekv/sqs"
)

// The tests run against goaws, an SQS-compatible server, inside the test
// process on 127.0.0.1. goaws keeps its queues in package variables, so
// one server serves the whole test binary; each test makes queues of its
// own.

var (
	goawsOnce sync.Once
	goawsURL  string
	goawsErr  error
	queueSeq  atomic.Int64
)

// server starts goaws once and returns its URL.
func server(t testing.TB) string {
	t.Helper()
	url, err := startServer()
	require.NoError(t, err)
	return url
}

// startServer is server for an Example, which has no testing.TB.
func startServer() (string, error) {
	goawsOnce.Do(func() {
		logrus.SetOutput(io.Discard)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			goawsErr = err
			return
		}
		_, port, _ := net.SplitHostPort(l.Addr().String())
		app.CurrentEnvironment = app.Environment{
			Host: "127.0.0.1", Port: port, AccountID: "100010001000", EnableDuplicates: true,
			QueueAttributeDefaults: app.EnvQueueAttributes{VisibilityTimeout: 30, MaximumMessageSize: 262144},
		}
		go func() { _ = http.Serve(l, router.New()) }() // ends with the test binary
		// goaws makes messages visible again, and moves them to a
		// dead-letter queue, only in this sweep.
		go gosqs.PeriodicTasks(100*time.Millisecond, make(chan struct{}))
		goawsURL = "http://" + l.Addr().String()
	})
	return goawsURL, goawsErr
}

// client returns the real SDK client on url, speaking SQS's query
// protocol with the SDK's own codec (goaws v0.4.5 does not speak the JSON
// protocol the SDK uses by default) and no credentials.
func client(url string) *sqs.Client {
	return sqs.New(sqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(url), Credentials: aws.AnonymousCredentials{},
	}, func(o *sqs.Options) { o.Protocol = awsquery.New(schemas.AmazonSQS) })
}

// newQueue creates a queue of its own for the test, with the visibility
// timeout given (goaws applies a queue's, not a receive's) and, if
// maxReceives > 0, a dead-letter queue; it returns the queue's URL and
// the dead-letter queue's.
func newQueue(t testing.TB, c *sqs.Client, visibility time.Duration, maxReceives int, fifo bool) (string, string) {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("q%d-%d", os.Getpid(), queueSeq.Add(1))
	attrs := map[string]string{"VisibilityTimeout": strconv.Itoa(int(visibility / time.Second))}
	var dlqURL string
	if maxReceives > 0 {
		dlq, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-dlq")})
		require.NoError(t, err)
		dlqURL = *dlq.QueueUrl
		attrs["RedrivePolicy"] = fmt.Sprintf(`{"maxReceiveCount": %d, "deadLetterTargetArn":"arn:aws:sqs::100010001000:%s-dlq"}`, maxReceives, name)
	}
	if fifo {
		name += ".fifo"
		attrs["FifoQueue"] = "true"
	}
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	require.NoError(t, err)
	return *q.QueueUrl, dlqURL
}

// depth returns the number of messages in the queue, visible or not.
func depth(t testing.TB, c *sqs.Client, url string) int {
	t.Helper()
	out, err := c.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages}})
	require.NoError(t, err)
	n, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	require.NoError(t, err)
	return n
}

// send sends one message with body "v-KEY" and key in the Idempotency-Key
// attribute.
func send(t testing.TB, c *sqs.Client, url, key string) {
	t.Helper()
	_, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("v-" + key),
		MessageAttributes: map[string]types.MessageAttributeValue{"Idempotency-Key": {DataType: aws.String("String"), StringValue: aws.String(key)}}})
	require.NoError(t, err)
}

// count is the tests' effect: one more to the count of the message's
// Idempotency-Key, in the store's transaction (see applycount).
func count(tx *oncekv.Tx, m *types.Message) ([]byte, error) {
	return nil, applycount.Add(tx, oncesqs.AttributeKey(oncesqs.DefaultKeyAttribute)(m))
}

// requireOnce requires that exactly want were applied, each once.
func requireOnce(t testing.TB, db *oncekv.DB, want []string) {
	t.Helper()
	oncetest.RequireAppliedOnce(t, db, want)
}

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("k-%04d", i)
	}
	return out
}

// soak returns n times ONCEKV_SQS_SOAK when that is a positive integer.
func soak(n int) int { return oncetest.Soak("ONCEKV_SQS_SOAK", n) }

// openDB opens a store in the test's temporary directory, closed and
// checked when the test ends.
func openDB(t testing.TB) *oncekv.DB { return oncetest.Open(t, nil) }

var quiet = slog.New(slog.DiscardHandler)

// runUntil runs c until done() holds (polled), then stops it and requires
// Run returned nil.
func runUntil(t testing.TB, c interface{ Run(context.Context) error }, limit time.Duration, done func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	require.Eventually(t, done, limit, 20*time.Millisecond)
	cancel()
	require.NoError(t, <-errc)
}
