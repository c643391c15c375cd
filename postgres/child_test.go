package postgres_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/postgres"
)

// childEnv, when set, makes this test binary a child process of one of
// the multi-process tests: TestMain runs the role it names instead of the
// tests, with its parameters in the environment.
const childEnv = "ONCEKV_PG_CHILD"

// childRoles are the roles a child process can play.
var childRoles = map[string]func(ctx context.Context, s *postgres.Store, pool *pgxpool.Pool) error{
	"stream": streamWorker,
	"fence":  fenceWorker,
	"charge": chargeWorker,
}

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

// runChild opens the store of the schema ONCEKV_PG_SCHEMA, on the
// database's clock like any host, and plays role.
func runChild(role string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "child %s: %v\n", role, err)
		return 1
	}
	fn := childRoles[role]
	if fn == nil {
		return fail(fmt.Errorf("unknown role"))
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv(dsnEnv))
	if err != nil {
		return fail(err)
	}
	defer pool.Close()
	s, err := postgres.Open(ctx, pool, postgres.Options{Schema: os.Getenv("ONCEKV_PG_SCHEMA"), ExpireInterval: -1})
	if err != nil {
		return fail(err)
	}
	defer s.Close()
	if err := fn(ctx, s, pool); err != nil {
		return fail(err)
	}
	return 0
}

// child is a running child process.
type child struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

// startChild re-runs this test binary as a child playing role on schema,
// with env (NAME=value pairs) added to its environment.
func startChild(t *testing.T, role, schema string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=" + role, "ONCEKV_PG_SCHEMA=" + schema}, env...)...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill() //nolint:errcheck // it may have exited
			cmd.Wait()         //nolint:errcheck // killed
		}
	})
	return &child{cmd: cmd, in: in, out: bufio.NewScanner(out)}
}
