//go:build unix

package checkout_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/dupproxy"
)

// The documents whose blocks the tests of this file check, from the
// repository's root.
const (
	dupproxyDoc = "docs/dupproxy.md"
	testingDoc  = "docs/testing-your-handlers.md"
)

// TestDocsDupproxySession runs the session of docs/dupproxy.md (the block
// after its marker) in bash, as written, with four changes said here: its
// "go run" of the shop and of dupproxy run the same packages built
// beforehand, its addresses 127.0.0.1:8080, :8081 and :9464 are free ports,
// /tmp/ is a temporary directory, and it runs in a directory of its own.
// What it prints must be the four answers' statuses and then the table of
// the doc's next block; testing-your-handlers.md shows the same table.
func TestDocsDupproxySession(t *testing.T) {
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the session needs %s: %v", tool, err)
		}
	}
	const marker = "<!-- checked: run by TestDocsDupproxySession in examples/checkout -->"
	blocks := docBlocks(t, dupproxyDoc, marker)
	require.Len(t, blocks, 2, "the session and its table")
	session, table := blocks[0], blocks[1]
	require.Equal(t, []string{table}, docBlocks(t, testingDoc, marker), "testing-your-handlers.md shows the table of dupproxy.md's run")

	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	build(t, bin, "./cmd/checkout")
	build(t, bin, "github.com/oncekv/oncekv/cmd/dupproxy")
	work := filepath.Join(dir, "work")
	require.NoError(t, os.MkdirAll(filepath.Join(work, "examples"), 0o755))
	tmp := filepath.Join(dir, "tmp")
	require.NoError(t, os.Mkdir(tmp, 0o755))

	script := session
	for _, addr := range []string{"127.0.0.1:8080", "127.0.0.1:8081", "127.0.0.1:9464"} {
		require.Contains(t, script, addr)
		script = strings.ReplaceAll(script, addr, freeAddr(t))
	}
	script = strings.ReplaceAll(script, "/tmp/", tmp+"/")
	prelude := `go() {
	case "$1 $2" in
	"run ./checkout/cmd/checkout") shift 2; exec "$DOCS_BIN/checkout" "$@" ;;
	"run ./cmd/dupproxy") shift 2; exec "$DOCS_BIN/dupproxy" "$@" ;;
	esac
	echo "the session runs a go command this test does not know: go $*" >&2
	return 2
}
`
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", prelude+script)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "DOCS_BIN="+bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // anything the session left running
	require.NoError(t, err, "the session failed; it said:\n%s%s", stdout.String(), stderr.String())
	require.Equal(t, "201\n201\n201\n400\n"+table, stdout.String(), "what the session printed (stderr:\n%s)", stderr.String())
	require.FileExists(t, filepath.Join(tmp, "report.json"))
}

// TestDocsDupproxyMetrics runs the session's payments through the package
// with the session's options, and requires the proxy's /metrics, once the
// copies are answered, to be docs/dupproxy.md's block without its # lines.
func TestDocsDupproxyMetrics(t *testing.T) {
	blocks := docBlocks(t, dupproxyDoc, "<!-- checked: run by TestDocsDupproxyMetrics in examples/checkout -->")
	require.Len(t, blocks, 1)
	want := blocks[0]
	// -fraction 1 -key both -compare-header Location
	_, p, front, client := shopBehindProxy(t, dupproxy.Options{Fraction: 1, Keys: dupproxy.BothKeys, CompareHeaders: []string{"Location"}})
	for _, key := range []string{"page-key-1", "page-key-2", "page-key-3", ""} {
		req, err := http.NewRequest(http.MethodPost, front.URL+"/pay", strings.NewReader(`{"amount_cents":1200}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, p.Wait(ctx))

	rec := httptest.NewRecorder()
	p.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	var got strings.Builder
	for _, line := range strings.SplitAfter(rec.Body.String(), "\n") {
		if !strings.HasPrefix(line, "#") {
			got.WriteString(line)
		}
	}
	require.Equal(t, want, got.String(), "docs/dupproxy.md's metrics are not what the proxy serves")
}

// build builds the package pkg (of this module or one it requires) into
// the directory bin.
func build(t *testing.T, bin, pkg string) {
	t.Helper()
	out, err := exec.Command("go", "build", "-o", bin+string(filepath.Separator), pkg).CombinedOutput()
	require.NoError(t, err, "go build %s: %s", pkg, out)
}

// freeAddr returns a 127.0.0.1 address with a port nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// docBlocks returns the code blocks that follow the line marker in the
// repository's file doc (a path from the repository's root).
func docBlocks(t *testing.T, doc, marker string) []string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(doc)))
	require.NoError(t, err)
	var blocks []string
	parts := strings.Split(string(src), marker+"\n```")
	for _, rest := range parts[1:] {
		_, rest, ok := strings.Cut(rest, "\n")
		require.True(t, ok)
		block, _, ok := strings.Cut(rest, "```\n")
		require.True(t, ok, "a block after %q in %s does not end", marker, doc)
		blocks = append(blocks, block)
	}
	return blocks
}
