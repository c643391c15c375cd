//go:build unix

package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDocsQueuesSession: docs/queues-and-admin.md's session is what
// queues, dead and redrive print on queueStore.
func TestDocsQueuesSession(t *testing.T) {
	want := docBlock(t, "docs/queues-and-admin.md", "TestDocsQueuesSession")
	dir := t.TempDir()
	require.NoError(t, os.Rename(queueStore(t), filepath.Join(dir, "app.db")))
	require.Equal(t, want, session(t, dir, want))
}

// TestDocsAdminURLBlock runs docs/queues-and-admin.md's two lines in bash,
// as written but for the handler's address (a live program's, behind the
// password the block encodes), with this build of oncekv on the PATH: the
// queues command must read the running program's store through the URL.
func TestDocsAdminURLBlock(t *testing.T) {
	block := docBlock(t, "docs/queues-and-admin.md", "TestDocsAdminURLBlock")
	_, url := liveApp(t)
	const docURL = "http://127.0.0.1:8080/debug/oncekv"
	require.Contains(t, block, docURL)
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", strings.ReplaceAll(block, docURL, url))
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), `"note-7"  2         1     held by dead letter 1`, "the live store's queue, by key")
}
