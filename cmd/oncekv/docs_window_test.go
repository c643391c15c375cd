package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// session runs every "$ oncekv ..." line of block in dir and returns the
// lines with what each printed after it, as a terminal would show them.
func session(t *testing.T, dir, block string) string {
	t.Helper()
	var got strings.Builder
	for _, line := range strings.Split(block, "\n") {
		cmdline, ok := strings.CutPrefix(line, "$ ")
		if !ok {
			continue
		}
		args := strings.Fields(cmdline)
		require.Equal(t, "oncekv", args[0], "the session runs only oncekv: %q", line)
		r := cliIn(t, dir, args[1:]...)
		require.Equal(t, 0, r.code, "%s: %s", line, r.stderr)
		got.WriteString(line + "\n" + r.stdout + r.stderr)
	}
	return got.String()
}

// TestDocsWindowAdvise: docs/window.md's advise block is what oncekv
// advise prints on advisedStore.
func TestDocsWindowAdvise(t *testing.T) {
	want := docBlock(t, "docs/window.md", "TestDocsWindowAdvise")
	dir := t.TempDir()
	require.NoError(t, os.Rename(advisedStore(t), filepath.Join(dir, "app.db")))
	require.Equal(t, want, session(t, dir, want))
}

// TestDocsTakeoverSession: docs/takeover.md's session is what parked and
// resolve print on parkedStore.
func TestDocsTakeoverSession(t *testing.T) {
	want := docBlock(t, "docs/takeover.md", "TestDocsTakeoverSession")
	dir := t.TempDir()
	require.NoError(t, os.Rename(parkedStore(t), filepath.Join(dir, "app.db")))
	require.Equal(t, want, session(t, dir, want))
}
