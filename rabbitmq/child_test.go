package rabbitmq_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
	"github.com/oncekv/oncekv/rabbitmq"
	"github.com/oncekv/oncekv/retry"
)

// childEnv, when set, makes the test binary run a consumer (its value is
// the JSON of a childConfig) instead of the tests: a process the chaos
// test can SIGKILL.
const childEnv = "ONCEKV_RABBITMQ_CHILD"

type childConfig struct {
	DB, URL, Queue, DLX string
}

func TestMain(m *testing.M) {
	oncetest.ChildMain(m, childEnv, func(c *childConfig) string { return c.DB }, consume)
}

// consume runs the consumer until SIGTERM or a SIGKILL, printing "applied
// KEY", "dup KEY" or the verdict's name and the key for each outcome.
func consume(ctx context.Context, db *oncekv.DB, c *childConfig) error {
	out := bufio.NewWriter(os.Stdout)
	cons, err := rabbitmq.NewConsumer(db, &rabbitmq.ConsumerOptions{
		URL: c.URL, Queue: c.Queue, DeadLetterExchange: c.DLX, Prefetch: 50,
		Retry: &retry.Policy{Base: 50 * time.Millisecond, Cap: 500 * time.Millisecond, MaxAttempts: -1},
		OnOutcome: func(o rabbitmq.Outcome) {
			verb := o.Verdict.Action.String()
			switch {
			case o.Verdict.Action == rabbitmq.Ack && o.Result.Duplicate:
				verb = "dup"
			case o.Verdict.Action == rabbitmq.Ack:
				verb = "applied"
			}
			fmt.Fprintln(out, verb, o.Key)
			// Flushed before the ack goes out: a line is lost only with
			// a delivery that will come back.
			_ = out.Flush()
		},
	}, func(tx *oncekv.Tx, d *amqp.Delivery) error { return count(tx, d.MessageId) })
	if err != nil {
		return err
	}
	return cons.Run(ctx)
}

// startChild runs the test binary again as a consumer of c, its lines
// going to l; the test's cleanup kills it if it still runs.
func startChild(t *testing.T, c childConfig, l *oncetest.Log) (*oncetest.LoggedChild, error) {
	return oncetest.StartLogged(t, childEnv, c, l, false)
}

// mustStart is startChild for the test's goroutine.
func mustStart(t *testing.T, c childConfig, l *oncetest.Log) *oncetest.LoggedChild {
	p, err := startChild(t, c, l)
	require.NoError(t, err)
	return p
}
