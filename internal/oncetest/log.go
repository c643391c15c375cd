package oncetest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// Log gathers the lines consumer children print, "VERB KEY", counting
// them by verb and remembering the keys seen with each. It is safe for
// concurrent use.
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

// LoggedChild is a consumer child process whose lines go to a Log
// (StartLogged).
type LoggedChild struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when its standard output has ended
}

// StartLogged runs the test binary again with no tests (-test.run=^$) and
// env set to cfg's JSON, so that the package's TestMain (ChildMain) runs
// its consumer. Each line the child prints goes to log, and to standard
// error too when echo is set. The test's cleanup kills it if it still
// runs. Unlike StartChild it fails no test, so any goroutine may call it.
func StartLogged(t testing.TB, env string, cfg any, log *Log, echo bool) (*LoggedChild, error) {
	v, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+string(v))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &LoggedChild{cmd: cmd, done: make(chan struct{})}
	t.Cleanup(c.Kill) // a test that failed half-way leaves no consumer behind
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if echo {
				fmt.Fprintln(os.Stderr, "child:", sc.Text())
			}
			log.Line(sc.Text())
		}
	}()
	return c, nil
}

// Kill SIGKILLs the child and waits until it and its output have ended.
func (c *LoggedChild) Kill() {
	_ = c.cmd.Process.Kill() // it may have exited on its own already
	<-c.done
	_ = c.cmd.Wait() // "signal: killed", the expected end
}
