package rabbitmq_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
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
	v := os.Getenv(childEnv)
	if v == "" {
		os.Exit(m.Run())
	}
	os.Exit(child(v))
}

// child runs the consumer until SIGTERM or a SIGKILL, printing "applied
// KEY", "dup KEY" or the verdict's name and the key for each outcome. It
// returns the exit code: 0 after SIGTERM, 1 when Run failed, 2 when it
// could not start.
func child(v string) int {
	var c childConfig
	if err := json.Unmarshal([]byte(v), &c); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	db, err := oncekv.Open(c.DB, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 2
	}
	defer db.Close()
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
		fmt.Fprintln(os.Stderr, "consumer:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := cons.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		return 1
	}
	return 0
}

// lines counts the lines the children print, by verb, and the distinct
// keys of each verb; safe for concurrent use.
type lines struct {
	mu    sync.Mutex
	count map[string]int
	keys  map[string]map[string]bool // bounded by the test's keys
}

func newLines() *lines {
	return &lines{count: make(map[string]int), keys: make(map[string]map[string]bool)}
}

func (l *lines) add(s string) {
	verb, key, _ := strings.Cut(s, " ")
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count[verb]++
	if l.keys[verb] == nil {
		l.keys[verb] = make(map[string]bool)
	}
	l.keys[verb][key] = true
}

func (l *lines) n(verb string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count[verb]
}

// distinct returns how many keys were printed with any of verbs.
func (l *lines) distinct(verbs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := make(map[string]bool)
	for _, v := range verbs {
		for k := range l.keys[v] {
			seen[k] = true
		}
	}
	return len(seen)
}

// proc is a consumer child process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when its output has ended
}

// startChild runs the test binary again as a consumer of c, its lines
// going to l; the test's cleanup kills it if it still runs.
func startChild(t *testing.T, c childConfig, l *lines) (*proc, error) {
	v, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(v))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	t.Cleanup(p.kill)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l.add(sc.Text())
		}
	}()
	return p, nil
}

// kill SIGKILLs the child and waits for it and its output to end.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill() // it may have exited already
	<-p.done
	_ = p.cmd.Wait()
}

// mustStart is startChild for the test's goroutine.
func mustStart(t *testing.T, c childConfig, l *lines) *proc {
	p, err := startChild(t, c, l)
	require.NoError(t, err)
	return p
}
