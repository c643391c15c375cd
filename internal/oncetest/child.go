package oncetest

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"testing"

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
