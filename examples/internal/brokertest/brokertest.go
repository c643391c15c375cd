// Package brokertest is what the broker examples' tests share: finding the
// broker that CI started, and running the consumer as a child process (the
// test binary run again) that the test SIGKILLs at random points and
// restarts, reading what it reports on its standard output.
package brokertest

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// URL returns the broker address in the environment variable env, or
// skips t, saying how to get one.
func URL(t *testing.T, env string) string {
	t.Helper()
	u := os.Getenv(env)
	if u == "" {
		t.Skipf("%s is not set: no broker to test against; run .ci/brokers.sh, which installs and starts mosquitto and nats-server on 127.0.0.1", env)
	}
	return u
}

// Scale returns n, times the value of ONCEKV_BROKER_SOAK when it is a
// positive integer: the default keeps each test well under a minute on two
// cores, a soak runs longer with more messages and more kills.
func Scale(n int) int {
	if k, err := strconv.Atoi(os.Getenv("ONCEKV_BROKER_SOAK")); err == nil && k > 0 {
		return n * k
	}
	return n
}

// Log gathers the lines the children print, "VERB KEY", counting them by
// verb and remembering the keys seen with each. It is safe for concurrent
// use.
type Log struct {
	mu    sync.Mutex
	lines map[string]int
	keys  map[string]map[string]bool // verb -> keys; bounded by the test's keys
}

// NewLog returns an empty Log.
func NewLog() *Log {
	return &Log{lines: make(map[string]int), keys: make(map[string]map[string]bool)}
}

// Line records one line.
func (l *Log) Line(s string) {
	verb, key, _ := strings.Cut(s, " ")
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines[verb]++
	if l.keys[verb] == nil {
		l.keys[verb] = make(map[string]bool)
	}
	l.keys[verb][key] = true
}

// Count returns how many lines of verb were printed.
func (l *Log) Count(verb string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines[verb]
}

// Keys returns how many distinct keys were printed with any of verbs.
func (l *Log) Keys(verbs ...string) int {
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

// Child is a consumer running in a child process.
type Child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when its standard output has ended
}

// Start runs the test binary again with no tests (-test.run=^$) and
// env=value in its environment; the test package's TestMain sees env and
// runs the consumer instead. Each line the child prints goes to log.
func Start(t *testing.T, env, value string, log *Log) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+value)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &Child{cmd: cmd, done: make(chan struct{})}
	t.Cleanup(c.Kill) // a test that failed half-way leaves no consumer behind
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if os.Getenv("ONCEKV_BROKER_VERBOSE") != "" {
				fmt.Fprintln(os.Stderr, "child:", sc.Text())
			}
			log.Line(sc.Text())
		}
	}()
	return c
}

// Kill SIGKILLs the child and waits until it and its output have ended.
func (c *Child) Kill() {
	_ = c.cmd.Process.Kill() // it may have exited on its own already
	<-c.done
	_ = c.cmd.Wait() // "signal: killed", the expected end
}

// KillLoop SIGKILLs the running child after a pause drawn uniformly from
// [0, maxPause) and starts a new one with start, again and again until
// stop is closed. It returns the child running at the end and the number
// of kills.
func KillLoop(rng *rand.Rand, c *Child, start func() *Child, maxPause time.Duration, stop <-chan struct{}) (*Child, int) {
	kills := 0
	for {
		select {
		case <-stop:
			return c, kills
		case <-time.After(time.Duration(rng.Int64N(int64(maxPause)))):
		}
		c.Kill()
		kills++
		c = start()
	}
}

// Say prints one "VERB KEY" line for the parent's Log; a child calls it.
func Say(verb, key string) {
	fmt.Println(verb + " " + key)
}
