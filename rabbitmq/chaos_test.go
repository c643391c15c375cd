package rabbitmq_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/rabbitmq"
	"github.com/oncekv/oncekv/relay"
	"github.com/oncekv/oncekv/retry"
)

// soak returns n times ONCEKV_AMQP_SOAK when that is a positive integer:
// the default keeps the test near half a minute on two cores, a soak runs
// more messages and more kills.
func soak(n int) int {
	if k, err := strconv.Atoi(os.Getenv("ONCEKV_AMQP_SOAK")); err == nil && k > 0 {
		return n * k
	}
	return n
}

// TestChaosKilledConsumerAndBrokerRestart is the article's RabbitMQ scene
// on a real broker. The producer is an outbox: messages enqueued in a
// local store, delivered by the relay through the Publisher (confirms:
// a message leaves the outbox only once the broker has it); a quarter of
// them are also published a second time under the same message_id, as a
// producer retrying after a lost confirm does. The consumer is a child
// process, SIGKILLed at random points and started again, over and over;
// once in the middle of the run the broker itself is SIGKILLed and
// restarted. At the end every key was applied exactly once (0 lost, 0
// doubled), the outbox is empty, nothing was dead-lettered, and the store
// suppressed duplicates.
func TestChaosKilledConsumerAndBrokerRestart(t *testing.T) {
	url := brokerURL(t)
	restart := os.Getenv("ONCEKV_AMQP_RESTART")
	if restart == "" {
		t.Skip("ONCEKV_AMQP_RESTART is not set: no way to restart the broker; .ci/rabbitmq.sh start exports it")
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 26))
	n := soak(600)
	cfg := childConfig{
		DB:    filepath.Join(t.TempDir(), "consumer.db"),
		URL:   url,
		Queue: unique("chaos"),
		DLX:   unique("chaos.dlx"),
	}
	dlq := cfg.Queue + rabbitmq.DefaultDeadLetterSuffix
	deleteAfter(t, url, []string{cfg.Queue, dlq}, []string{cfg.DLX})
	ctx := context.Background()

	// The queue as the consumer declares it, so that nothing published
	// before the first consumer starts is returned unroutable.
	ch := channel(t, url)
	_, err := ch.QueueDeclare(cfg.Queue, true, false, false, false, amqp.Table{"x-dead-letter-exchange": cfg.DLX})
	require.NoError(t, err)

	// The producer's outbox and its relay.
	pdb, err := oncekv.Open(filepath.Join(t.TempDir(), "producer.db"), nil)
	require.NoError(t, err)
	defer pdb.Close()
	outbox, err := queue.Open(pdb, "outbox", &queue.Options{
		Visibility: 5 * time.Second,
		Retry:      &retry.Policy{Base: 50 * time.Millisecond, Cap: time.Second, MaxAttempts: -1},
	})
	require.NoError(t, err)
	pub, err := rabbitmq.NewPublisher(&rabbitmq.PublisherOptions{URL: url, RoutingKey: cfg.Queue})
	require.NoError(t, err)
	defer pub.Close()
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() {
		relayDone <- relay.Run(relayCtx, outbox, pub.Send, &relay.Options{SendTimeout: 2 * time.Second, Grace: -1})
	}()
	defer func() {
		stopRelay()
		require.NoError(t, <-relayDone)
	}()

	log := oncetest.NewLog()
	child := mustStart(t, cfg, log)
	stopKills, killed := make(chan struct{}), make(chan int, 1)
	go func() {
		kills := 0
		defer func() { killed <- kills }()
		for {
			select {
			case <-stopKills:
				return
			case <-time.After(time.Duration(rng.Int64N(int64(400 * time.Millisecond)))):
			}
			child.Kill()
			kills++
			var err error
			if child, err = startChild(t, cfg, log); err != nil {
				t.Errorf("restarting the consumer: %v", err)
				return
			}
		}
	}()

	twice := 0
	var restartTook time.Duration
	for i := range n {
		key := fmt.Sprintf("r-%05d", i)
		body := []byte(key)
		_, err := outbox.Enqueue(ctx, queue.Message{Key: key, Body: body})
		require.NoError(t, err)
		if i%4 == 0 {
			// The producer's own retry: the same message_id again. The
			// broker may be down (the restart): retry until it takes it.
			require.NoError(t, retry.Do(ctx, &retry.Policy{Base: 50 * time.Millisecond, Cap: time.Second, MaxAttempts: -1},
				func(ctx context.Context, _ int) error {
					sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					defer cancel()
					return pub.Send(sctx, &queue.Message{Key: key, Body: body, Token: uint64(i) + 1<<40})
				}))
			twice++
		}
		if i == n/2 {
			t0 := time.Now()
			out, err := exec.Command("sh", "-c", restart).CombinedOutput()
			require.NoError(t, err, "restarting the broker: %s", out)
			restartTook = time.Since(t0)
		}
		time.Sleep(5 * time.Millisecond) // spread the messages over the kills
	}

	require.Eventually(t, func() bool {
		s, err := outbox.Stats()
		return err == nil && s.Depth == 0
	}, 90*time.Second, 50*time.Millisecond, "the outbox did not drain")
	require.Eventually(t, func() bool { return log.Keys("applied", "dup") == n }, 90*time.Second, 20*time.Millisecond,
		"the consumers did not see every key")
	close(stopKills)
	kills := <-killed
	// The last consumer empties the queue: every copy acked.
	require.Eventually(t, func() bool {
		q, err := channel(t, url).QueueDeclarePassive(cfg.Queue, true, false, false, false, amqp.Table{"x-dead-letter-exchange": cfg.DLX})
		return err == nil && q.Messages == 0
	}, 60*time.Second, 100*time.Millisecond, "messages left in the queue")
	child.Kill()

	db, err := oncekv.Open(cfg.DB, nil)
	require.NoError(t, err)
	defer db.Close()
	got := applied(t, db)
	doubled := 0
	for _, c := range got {
		if c > 1 {
			doubled++
		}
	}
	lost := n - len(got)
	dead, err := channel(t, url).QueueDeclarePassive(dlq, true, false, false, false, nil)
	require.NoError(t, err)
	t.Logf("messages %d, published twice %d, consumer kills %d, broker restarts 1 (%.1fs), applied lines %d, duplicates suppressed %d, requeues %d, dead letters %d, lost %d, doubled %d",
		n, twice, kills, restartTook.Seconds(), log.Count("applied"), log.Count("dup"), log.Count("requeue"), dead.Messages, lost, doubled)
	require.Zero(t, lost, "keys never applied")
	require.Zero(t, doubled, "keys applied more than once")
	require.Zero(t, dead.Messages, "dead letters")
	require.Positive(t, log.Count("dup"), "the duplicates reached the store and were suppressed")
}
