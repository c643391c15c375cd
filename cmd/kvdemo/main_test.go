package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// kvdemo runs the command in-process and returns its exit code and output.
func kvdemo(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// requireLine fails unless some line of out matches pattern.
func requireLine(t *testing.T, out, pattern string) []string {
	t.Helper()
	m := regexp.MustCompile(`(?m)` + pattern).FindStringSubmatch(out)
	require.NotNil(t, m, "no line matches %q in:\n%s", pattern, out)
	return m
}

// TestDemo runs the whole story on a fresh file and checks the lines that
// carry its point, so the demo cannot rot silently.
func TestDemo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kvdemo.db")
	code, out, errOut := kvdemo(t, "demo", "-db", path)
	require.Equal(t, 0, code, "stderr: %s\nstdout:\n%s", errOut, out)
	require.Empty(t, errOut)
	require.NotContains(t, out, "MISMATCH")
	require.Contains(t, out, "(new file)")
	require.Less(t, strings.Count(out, "\n"), 80, "the demo should stay short")
	require.Contains(t, out, "20 first attempts")
	require.Contains(t, out, "20 orders delivered, each applied once by the receiver  OK")
	require.Contains(t, out, "redriven with its key, applied 1 time(s)  OK")

	// Step 2: the retry storm applied each deposit once.
	requireLine(t, out, `deliveries received\s+24$`)
	requireLine(t, out, `effects applied\s+6\s+\(distinct keys: 6\)\s+OK$`)
	dups := requireLine(t, out, `duplicates suppressed\s+(\d+)\s+\(db\.Stats\)\s+OK$`)
	n, err := strconv.Atoi(dups[1])
	require.NoError(t, err)
	require.Positive(t, n, "a retry storm with no duplicates suppressed is suspicious")
	requireLine(t, out, `alice\s+1000\s+140\s+1140\s+1140\s+OK$`)
	requireLine(t, out, `bob\s+500\s+310\s+810\s+810\s+OK$`)
	requireLine(t, out, `carol\s+250\s+375\s+625\s+625\s+OK$`)

	// Step 3: key reuse is rejected.
	requireLine(t, out, `error: .*"dep-001".*idempotency key reused with a different payload$`)
	requireLine(t, out, `errors\.Is\(err, oncekv\.ErrKeyReuse\) = true, .* OK$`)

	// Step 4: transient rolled back then applied; permanent recorded.
	requireLine(t, out, `carol still 625\s+OK$`)
	requireLine(t, out, `try 2\s+applied: "carol \+10 -> 635"\s+OK$`)
	requireLine(t, out, `failed permanently: insufficient funds: bob has 810, asked 5000$`)
	requireLine(t, out, `errors\.Is\(err, oncekv\.ErrFailed\) = true\s+OK$`)

	// Step 5: the mark survived the reopen.
	requireLine(t, out, `duplicate=true, effect not run, response "alice \+100 -> \d+" .*OK$`)

	// The window story: expiry drops the old window, a late retry applies.
	requireLine(t, out, `window 09:00-10:00\s+3 marks$`)
	requireLine(t, out, `11:00\s+t-0900-a redelivered: duplicate=true\s+OK$`)
	requireLine(t, out, `Expire: 1 window dropped, 3 marks .*OK$`)
	requireLine(t, out, `after the window: duplicate=false, applied again \(by design\)\s+OK$`)
	requireLine(t, out, `its window still live: duplicate=true\s+OK$`)

	// The reorder story: the delayed set(x,1) is refused by the fence.
	requireLine(t, out, `B  set\(x,2\): applied$`)
	requireLine(t, out, `A  set\(x,1\): refused, stored fence 2 > presented 1$`)
	requireLine(t, out, `x = 2 with fence 2; set\(x,1\) redelivered: duplicate=true  OK$`)

	// The claim story: the worker taken over is fenced off; B's repeated
	// call carries the same key, so one e-mail goes out.
	requireLine(t, out, `worker A claims welcome-ann: token 1, lease 30s, sends, then stalls 45s$`)
	requireLine(t, out, `worker B takes over: token 2, same key, message 1 sent, completes  OK$`)
	requireLine(t, out, `worker A wakes: send refused, Complete: fenced off by a newer writer: stored fence 2, presented 1  OK$`)
	requireLine(t, out, `e-mails delivered: 1; redelivery: done=true, "message 1 sent"  OK$`)

	// The last step: counters of both sessions.
	requireLine(t, out, `deposit\s+7\s+19\s+1\s+1\s+0\s+0$`)
	requireLine(t, out, `withdraw\s+0\s+0\s+0\s+0\s+1\s+1$`)
	require.Contains(t, out, "All checks passed.")

	code, out, errOut = kvdemo(t, "inspect", "-db", path)
	require.Equal(t, 0, code, errOut)
	requireLine(t, out, `^"bank"\s+3$`)
	requireLine(t, out, `^alice\s+1140$`)
	requireLine(t, out, `^bob\s+810$`)
	requireLine(t, out, `^carol\s+635$`)
}

// TestDemoRerun checks that a second run starts afresh, and that -keep
// carries the balances over with new keys.
func TestDemoRerun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kvdemo.db")
	code, _, errOut := kvdemo(t, "demo", "-db", path)
	require.Equal(t, 0, code, errOut)

	code, out, errOut := kvdemo(t, "demo", "-db", path)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "(new file)")
	requireLine(t, out, `alice\s+1000\s+140\s+1140\s+1140\s+OK$`)

	code, out, errOut = kvdemo(t, "demo", "-db", path, "-keep")
	require.Equal(t, 0, code, "stderr: %s\nstdout:\n%s", errOut, out)
	require.NotContains(t, out, "MISMATCH")
	require.Contains(t, out, `(kept, run 2: keys start with "r2-")`)
	requireLine(t, out, `alice\s+1140\s+140\s+1280\s+1280\s+OK$`)
	requireLine(t, out, `redeliver r2-dep-001$`)
}

// TestDemoRefusesForeignFiles checks that the demo deletes only oncekv
// files: anything else at -db is left exactly as it was.
func TestDemoRefusesForeignFiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, path string)
		why  string
	}{
		{"text file", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, []byte("my notes\n"), 0o600))
		}, "not a bbolt file"},
		{"empty file", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, nil, 0o600))
		}, "it is an empty file"},
		{"directory", func(t *testing.T, path string) {
			require.NoError(t, os.Mkdir(path, 0o700))
		}, "it is a directory"},
		{"bbolt file of another program", func(t *testing.T, path string) {
			writeBolt(t, path, func(tx *bolt.Tx) error {
				_, err := tx.CreateBucket([]byte("invoices"))
				return err
			})
		}, "a bbolt file of another program"},
		{"empty bbolt file", func(t *testing.T, path string) {
			writeBolt(t, path, func(*bolt.Tx) error { return nil })
		}, "a bbolt file of another program"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "precious")
			tc.make(t, path)
			before := snapshot(t, path)

			for _, args := range [][]string{
				{"demo", "-db", path},
				{"demo", "-db", path, "-keep"},
				{"inspect", "-db", path},
			} {
				code, out, errOut := kvdemo(t, args...)
				require.Equal(t, 1, code, "%v: stdout:\n%s", args, out)
				require.Contains(t, errOut, "is not an oncekv database")
				require.Contains(t, errOut, tc.why)
				require.Equal(t, before, snapshot(t, path), "%v changed the file", args)
			}
		})
	}
}

func TestInspectMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.db")
	code, _, errOut := kvdemo(t, "inspect", "-db", path)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "does not exist")
	require.NoFileExists(t, path, "inspect must not create a store")
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string // in stdout or stderr
	}{
		{nil, 2, "Commands:"},
		{[]string{"help"}, 0, "Commands:"},
		{[]string{"frob"}, 2, `unknown command "frob"`},
		{[]string{"demo", "-nope"}, 2, "flag provided but not defined: -nope"},
		{[]string{"demo", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"demo", "-h"}, 0, "Usage: kvdemo demo"},
		{[]string{"inspect", "-h"}, 0, "Usage: kvdemo inspect"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := kvdemo(t, tc.args...)
			require.Equal(t, tc.code, code)
			require.Contains(t, out+errOut, tc.want)
		})
	}
}

func writeBolt(t *testing.T, path string, fn func(*bolt.Tx) error) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(fn))
	require.NoError(t, b.Close())
}

// snapshot returns what the test compares to tell a file unchanged.
func snapshot(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	if fi.IsDir() {
		return "dir " + fi.Mode().String()
	}
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return fi.Mode().String() + " " + string(data)
}
