package main_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// update regenerates the golden files: go test ./cmd/oncekv -run Golden -update
var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// bin is the oncekv binary built for these tests.
var bin string

// childEnv names the environment variable that makes this test binary the
// child that takes a claim and waits to be killed (see claimAndWait).
const childEnv = "ONCEKV_CLI_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		claimAndWait(path)
		return
	}
	flag.Parse()
	dir, err := os.MkdirTemp("", "oncekv-cli")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "oncekv")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// t0 is the fake clock's start: the stores the tests build are dated, so
// that what the CLI prints about them does not depend on the day.
var t0 = time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)

// at formats t0+d for the CLI's -now.
func at(d time.Duration) string { return t0.Add(d).Format(time.RFC3339Nano) }

// fakeClock is a clock the test moves by hand.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

// openStore opens (creating) a store at path on clock c, as a program would.
func openStore(t testing.TB, path string, c *fakeClock) *oncekv.DB {
	t.Helper()
	db, err := oncekv.Open(path, &oncekv.Options{Now: c.Now, NoSync: true, ExpireInterval: -1})
	require.NoError(t, err)
	return db
}

// fixture builds the store most tests read: two windows, marks of two
// handlers in the three states, and a user bucket; the claim is left in
// progress, with its lease running until t0+2h.
func fixture(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "app.db")
	c := &fakeClock{now: t0.Add(5 * time.Minute)}
	db := openStore(t, path, c)
	defer func() { require.NoError(t, db.Close()) }()
	ctx := context.Background()
	apply := func(h, k, payload string, effect func(tx *oncekv.Tx) ([]byte, error)) {
		_, err := db.Apply(ctx, oncekv.Request{Handler: h, Key: k, Payload: []byte(payload)}, effect)
		if !errors.Is(err, oncekv.ErrFailed) {
			require.NoError(t, err)
		}
	}
	apply("pay", "order-1", "100 EUR", func(tx *oncekv.Tx) ([]byte, error) {
		b, err := tx.CreateBucketIfNotExists([]byte("balances"))
		require.NoError(t, err)
		require.NoError(t, b.Put([]byte("alice"), []byte("100")))
		require.NoError(t, b.Put([]byte{0xff, 0x00}, []byte{0x80, 0x01})) // not UTF-8
		return []byte("ok"), nil
	})
	c.now = c.now.Add(10 * time.Minute)
	apply("email", "welcome-7", "hi", func(*oncekv.Tx) ([]byte, error) {
		return nil, oncekv.Permanent(errors.New("mailbox does not exist"))
	})
	c.now = t0.Add(70 * time.Minute) // the next window
	apply("pay", "order-2", "5 EUR", func(*oncekv.Tx) ([]byte, error) { return []byte{0, 1, 2}, nil })
	_, err := db.Claim(ctx, oncekv.Request{Handler: "email", Key: "receipt-9", Payload: []byte("r")}, 50*time.Minute)
	require.NoError(t, err)
	return path
}

// result is one run of the binary.
type result struct {
	stdout, stderr string
	code           int
}

// cli runs the oncekv binary with args.
func cli(t testing.TB, args ...string) result {
	t.Helper()
	return cliAt(t, "", nil, args...)
}

// cliIn runs the oncekv binary with args in dir ("": this one).
func cliIn(t testing.TB, dir string, args ...string) result {
	t.Helper()
	return cliAt(t, dir, nil, args...)
}

// cliEnv is cli with env added to the environment.
func cliEnv(t testing.TB, env []string, args ...string) result {
	t.Helper()
	return cliAt(t, "", env, args...)
}

// cliAt runs the oncekv binary with args in dir ("": this one), env added
// to the environment.
func cliAt(t testing.TB, dir string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return result{stdout.String(), stderr.String(), code}
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run with -update to create it")
	require.Equal(t, string(want), got)
}

// claimAndWait is the child of TestClaimsAfterSIGKILL: it claims two keys
// on the store at path, one with a lease that outlives the test and one
// that runs out at t0+1m, says so on stdout, and waits to be killed with
// the claims in progress.
func claimAndWait(path string) {
	c := &fakeClock{now: t0}
	db, err := oncekv.Open(path, &oncekv.Options{Now: c.Now, ExpireInterval: -1})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for key, lease := range map[string]time.Duration{"stuck": time.Hour, "short": time.Minute} {
		if _, err := db.Claim(ctx, oncekv.Request{Handler: "charge", Key: key}, lease); err != nil {
			panic(err)
		}
	}
	fmt.Println("claimed")
	select {} // until SIGKILL: the claims stay IN_PROGRESS in the file
}

// killedStore runs claimAndWait in a child and SIGKILLs it once it has
// claimed, leaving a store with two stuck claims.
func killedStore(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "killed.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := bufio.NewScanner(stdout)
	require.True(t, lines.Scan(), "the child said nothing")
	require.Equal(t, "claimed", lines.Text())
	require.NoError(t, cmd.Process.Kill())
	require.Error(t, cmd.Wait()) // killed
	return path
}

// lines splits output into its lines, without the empty last one.
func lines(s string) []string {
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// writeFile writes s to path.
func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }
