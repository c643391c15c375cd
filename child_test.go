package oncekv_test

import (
	"bufio"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// startChild re-runs this test binary as a child process, running only the
// tests that match run (none, for a child that TestMain dispatches), with
// env=value added to its environment so that it knows it is the child. It
// returns the running command and a scanner over its standard output; the
// caller kills it or waits for it.
func startChild(t *testing.T, run, env, value string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run)
	cmd.Env = append(os.Environ(), env+"="+value)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	return cmd, bufio.NewScanner(stdout)
}
