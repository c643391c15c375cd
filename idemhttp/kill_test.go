package idemhttp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/idemhttptest"
)

// serverChildEnv, set in a child's environment to "path|clock offset|mode",
// makes the test binary serve the kill test's handler instead of running
// tests. mode "hang" makes the handler block until the process is killed.
const serverChildEnv = "ONCEKV_IDEMHTTP_SERVER_CHILD"

// TestMain lets the test binary double as the kill test's server process.
func TestMain(m *testing.M) {
	if spec := os.Getenv(serverChildEnv); spec != "" {
		serverChild(spec)
		return
	}
	os.Exit(m.Run())
}

// serverChild serves a payment handler on 127.0.0.1 behind the middleware,
// printing "ADDR host:port" once listening and "RAN key token" each time the
// handler starts. A completed payment stages an increment of the charge
// counter, committed with the stored 201.
func serverChild(spec string) {
	parts := strings.Split(spec, "|")
	offset, err := time.ParseDuration(parts[1])
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	now := func() time.Time { return time.Now().Add(offset) }
	db, err := oncekv.Open(parts[0], &oncekv.Options{ExpireInterval: -1, Now: now})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	var out sync.Mutex
	mw, err := idemhttp.New(db, &idemhttp.Options{Scope: idemhttptest.UserScope, Lease: 30 * time.Second, Now: now})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out.Lock()
		fmt.Println("RAN", idemhttp.Key(r), idemhttp.Token(r))
		out.Unlock()
		if parts[2] == "hang" {
			select {} // killed here, mid-handler
		}
		if err := idemhttp.Stage(r, addCharge); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "charged once")
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	out.Lock()
	fmt.Println("ADDR", ln.Addr())
	out.Unlock()
	_ = http.Serve(ln, h)
}

// addCharge counts one charge in the "charges" bucket.
func addCharge(tx *oncekv.Tx) error {
	b, err := tx.CreateBucketIfNotExists([]byte("charges"))
	if err != nil {
		return err
	}
	var n uint64
	if v := b.Get([]byte("count")); len(v) == 8 {
		n = binary.BigEndian.Uint64(v)
	}
	return b.Put([]byte("count"), binary.BigEndian.AppendUint64(nil, n+1))
}

// child is a running server process.
type child struct {
	cmd   *exec.Cmd
	lines chan string
	addr  string
}

func startServer(t *testing.T, path string, offset time.Duration, mode string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serverChildEnv+"="+fmt.Sprintf("%s|%s|%s", path, offset, mode))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, lines: make(chan string, 16)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() { c.kill(t) })
	line := c.next(t)
	require.True(t, strings.HasPrefix(line, "ADDR "), line)
	c.addr = strings.TrimPrefix(line, "ADDR ")
	return c
}

// next returns the child's next line, failing after a generous minute.
func (c *child) next(t *testing.T) string {
	t.Helper()
	select {
	case line, ok := <-c.lines:
		require.True(t, ok, "the child ended early")
		return line
	case <-time.After(time.Minute):
		t.Fatal("no line from the child")
		return ""
	}
}

// kill SIGKILLs the child and returns the lines it printed that were not
// read yet.
func (c *child) kill(t *testing.T) []string {
	t.Helper()
	if c.cmd.ProcessState == nil {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	}
	var rest []string
	for line := range c.lines {
		rest = append(rest, line)
	}
	return rest
}

func (c *child) pay(ctx context.Context) (idemhttptest.Reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.addr+"/pay", bytes.NewReader([]byte(`{"amount":12}`)))
	if err != nil {
		return idemhttptest.Reply{}, err
	}
	req.Header.Set("Idempotency-Key", "order-1")
	req.Header.Set("X-User", "alice")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return idemhttptest.Reply{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return idemhttptest.Reply{Status: resp.StatusCode, Header: resp.Header, Body: body}, err
}

// TestServerKilledMidHandler kills the server process (SIGKILL) while the
// handler runs, restarts it past the lease, and retries: the handler runs
// again, once. Then it kills the server right after a stored 201 and
// retries again: the answer is replayed, and the handler does not run.
func TestServerKilledMidHandler(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kill.db")

	first := startServer(t, path, 0, "hang")
	errc := make(chan error, 1)
	go func() {
		_, err := first.pay(context.Background())
		errc <- err
	}()
	ran := strings.Fields(first.next(t))
	require.Equal(t, "RAN", ran[0])
	first.kill(t)
	require.Error(t, <-errc, "the client of a killed server gets no answer")

	// Restarted an hour later: the dead handler's 30 s lease is over, so
	// the retry claims the key and runs the handler again.
	second := startServer(t, path, time.Hour, "ok")
	rep, err := second.pay(context.Background())
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, rep.Status)
	require.False(t, rep.Replayed())
	again := strings.Fields(second.next(t))
	require.Equal(t, ran[1], again[1], "the retry carries the same downstream key")
	oldToken, err := strconv.ParseUint(ran[2], 10, 64)
	require.NoError(t, err)
	newToken, err := strconv.ParseUint(again[2], 10, 64)
	require.NoError(t, err)
	require.Greater(t, newToken, oldToken, "the takeover carries a greater token")
	require.Empty(t, second.kill(t), "the handler ran once in the second process")

	// Killed right after the stored 201: the retry is a replay.
	third := startServer(t, path, 2*time.Hour, "ok")
	rep2, err := third.pay(context.Background())
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, rep2.Status)
	require.True(t, rep2.Replayed())
	require.Equal(t, rep.Body, rep2.Body)
	require.Empty(t, third.kill(t), "the handler must not run after a stored 2xx")

	db, err := oncekv.Open(path, &oncekv.Options{ExpireInterval: -1})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		b := tx.Bucket([]byte("charges"))
		require.NotNil(t, b)
		require.Equal(t, uint64(1), binary.BigEndian.Uint64(b.Get([]byte("count"))), "charged exactly once")
		return nil
	}))
}
