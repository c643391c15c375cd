package oncetest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ChildMain is the TestMain of a package whose tests run themselves again
// as child processes (StartChild): when the environment variable env is
// set, it calls child with its value and exits with child's code instead
// of running the tests.
func ChildMain(m *testing.M, env string, child func(cfg string) int) {
	if v := os.Getenv(env); v != "" {
		os.Exit(child(v))
	}
	os.Exit(m.Run())
}

// StartChild runs the test binary again with no tests and env set to the
// JSON of cfg, so that ChildMain calls the package's child function, and
// returns the process with the channel of the lines it prints on its
// standard output, closed when that ends. The test's cleanup SIGKILLs it
// if it still runs.
func StartChild(t testing.TB, env string, cfg any) (*exec.Cmd, <-chan string) {
	t.Helper()
	v, err := json.Marshal(cfg)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+string(v))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
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
	return cmd, lines
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
// its n messages (what says which), then "batch"; it flushes w, then
// sleeps pause, the window between the store's commit and the broker's
// ack that Chaos kills the child in.
func SayBatch(w *bufio.Writer, n int, what func(i int) (key string, dup bool), pause time.Duration) {
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
	time.Sleep(pause)
}

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
	cmd   *exec.Cmd
	Lines <-chan string // the running child's lines, closed when it exits

	Rounds, Kills, WindowKills, Applied, Dups int

	batch []string
	owed  map[string]bool // bounded by the test's keys
}

// NewChaos starts the first child with cfg.
func NewChaos(t testing.TB, env string, cfg any) *Chaos {
	c := &Chaos{t: t, env: env, cfg: cfg, owed: make(map[string]bool)}
	c.cmd, c.Lines = StartChild(t, env, cfg)
	c.Rounds++
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

// EndBatch forgets the batch just reported, which was not killed.
func (c *Chaos) EndBatch() { c.batch = c.batch[:0] }

// Kill SIGKILLs the child, waits for it, and starts another. inWindow
// says the kill follows a "batch" line at once.
func (c *Chaos) Kill(inWindow bool) {
	require.NoError(c.t, c.cmd.Process.Kill())
	_ = c.cmd.Wait()
	c.Kills++
	if inWindow {
		c.WindowKills++
		for _, k := range c.batch {
			c.owed[k] = true
		}
	}
	c.batch = c.batch[:0]
	c.cmd, c.Lines = StartChild(c.t, c.env, c.cfg)
	c.Rounds++
}

// Owed returns how many keys of batches killed in the window have not
// come back as duplicates yet.
func (c *Chaos) Owed() int { return len(c.owed) }

// Exited fails the test: the child's output ended without a kill.
func (c *Chaos) Exited() {
	c.t.Fatalf("the consumer exited on its own: %v", c.cmd.Wait())
}

// Stop SIGKILLs the running child and waits for it.
func (c *Chaos) Stop() {
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}
