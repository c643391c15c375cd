package oncetest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// ChildMain is the TestMain of a package whose tests run themselves again
// as consumer processes (StartChild). In the tests' process it runs m. In
// a child it decodes the environment variable env's value (StartChild's
// cfg) into a C, opens the store at dbPath(c), runs consume with a context
// that SIGTERM ends, and exits: 0 when consume returned nil, 1 when it
// failed, 2 when it could not start.
func ChildMain[C any](m *testing.M, env string, dbPath func(c *C) string, consume func(ctx context.Context, db *oncekv.DB, c *C) error) {
	v := os.Getenv(env)
	if v == "" {
		os.Exit(m.Run())
	}
	os.Exit(child(v, dbPath, consume))
}

// child is ChildMain's child side; it returns the exit code, so that its
// defers run first.
func child[C any](v string, dbPath func(c *C) string, consume func(ctx context.Context, db *oncekv.DB, c *C) error) int {
	var c C
	if err := json.Unmarshal([]byte(v), &c); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	db, err := oncekv.Open(dbPath(&c), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 2
	}
	defer db.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := consume(ctx, db, &c); err != nil {
		fmt.Fprintln(os.Stderr, "consume:", err)
		return 1
	}
	return 0
}

// Child is a consumer process StartChild started.
type Child struct {
	Cmd   *exec.Cmd
	Lines <-chan string // what it prints, closed when its output ends
	in    io.WriteCloser
}

// StartChild runs the test binary again with no tests and env set to the
// JSON of cfg, so that ChildMain runs the package's consumer, and returns
// it with the channel of the lines it prints on its standard output. The
// test's cleanup SIGKILLs it if it still runs.
func StartChild(t testing.TB, env string, cfg any) *Child {
	t.Helper()
	v, err := json.Marshal(cfg)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+string(v))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return &Child{Cmd: cmd, Lines: lines, in: in}
}

// Soak returns n times the value of the environment variable env when
// that is a positive integer, else n: the default keeps a chaos test
// short, a soak runs it longer.
func Soak(env string, n int) int {
	if k, err := strconv.Atoi(os.Getenv(env)); err == nil && k > 0 {
		return n * k
	}
	return n
}

// SayBatch is a chaos child's report of one batch, once the batch
// committed in the store: a line "applied KEY" or "dup KEY" for each of
// its n messages (what says which), then "batch" on standard output;
// then it waits for the parent's go-ahead on standard input (a line, or
// its end), so that a kill the parent decides on lands between the store's
// commit and the broker's ack, whatever the machine's load.
func SayBatch(n int, what func(i int) (key string, dup bool)) {
	w := bufio.NewWriter(os.Stdout)
	for i := range n {
		key, dup := what(i)
		verb := "applied"
		if dup {
			verb = "dup"
		}
		fmt.Fprintln(w, verb, key)
	}
	fmt.Fprintln(w, "batch")
	_ = w.Flush()
	_, _ = stdin.ReadString('\n')
}

// stdin is the child's standard input, read by SayBatch.
var stdin = bufio.NewReader(os.Stdin)

// Chaos is the parent's side of a chaos test: it runs a consumer child
// (StartChild), reads what it says (SayBatch), and SIGKILLs and restarts
// it on demand, counting rounds (children started), kills, applied and
// duplicate lines. A kill right after a "batch" line lands between the
// store's commit and the broker's ack: that batch's keys are then owed,
// and each must come back later as a "dup" line. Only the test's
// goroutine may call its methods.
type Chaos struct {
	t     testing.TB
	env   string
	cfg   any
	child *Child
	Lines <-chan string // the running child's lines, closed when it exits

	Rounds, Kills, WindowKills, Applied, Dups int

	batch []string
	owed  map[string]bool // bounded by the test's keys
}

// NewChaos starts the first child with cfg.
func NewChaos(t testing.TB, env string, cfg any) *Chaos {
	c := &Chaos{t: t, env: env, cfg: cfg, owed: make(map[string]bool)}
	c.start()
	return c
}

// Line takes one line of the child; it reports whether it ended a batch.
func (c *Chaos) Line(line string) bool {
	verb, key, _ := strings.Cut(line, " ")
	switch verb {
	case "applied":
		c.Applied++
		c.batch = append(c.batch, key)
	case "dup":
		c.Dups++
		delete(c.owed, key)
		c.batch = append(c.batch, key)
	case "batch":
		return true
	}
	return false
}

// EndBatch lets the child go on after the batch it just reported (it
// acks it), and forgets the batch.
func (c *Chaos) EndBatch() {
	c.batch = c.batch[:0]
	_, _ = io.WriteString(c.child.in, "\n") // a child that died meanwhile is seen by Lines
}

func (c *Chaos) start() {
	c.child = StartChild(c.t, c.env, c.cfg)
	c.Lines = c.child.Lines
	c.Rounds++
}

// Kill SIGKILLs the child, waits for it, and starts another. inWindow
// says the kill follows a "batch" line at once.
func (c *Chaos) Kill(inWindow bool) {
	require.NoError(c.t, c.child.Cmd.Process.Kill())
	_ = c.child.Cmd.Wait()
	c.Kills++
	if inWindow {
		c.WindowKills++
		for _, k := range c.batch {
			c.owed[k] = true
		}
	}
	c.batch = c.batch[:0]
	c.start()
}

// Owed returns how many keys of batches killed in the window have not
// come back as duplicates yet.
func (c *Chaos) Owed() int { return len(c.owed) }

// Exited fails the test: the child's output ended without a kill.
func (c *Chaos) Exited() {
	c.t.Fatalf("the consumer exited on its own: %v", c.child.Cmd.Wait())
}

// Stop SIGKILLs the running child and waits for it.
func (c *Chaos) Stop() {
	_ = c.child.Cmd.Process.Kill()
	_ = c.child.Cmd.Wait()
}
