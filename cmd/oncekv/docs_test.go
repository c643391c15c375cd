package main_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// docBlock returns the code block that follows the marker naming test in
// the repository's file doc (a path from the repository's root).
func docBlock(t *testing.T, doc, test string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", doc))
	require.NoError(t, err)
	marker := "<!-- checked: run by " + test + " in cmd/oncekv -->\n"
	_, rest, ok := strings.Cut(string(src), marker)
	require.True(t, ok, "%s has no marker %q", doc, marker)
	fence, rest, ok := strings.Cut(rest, "\n")
	require.True(t, ok && strings.HasPrefix(fence, "```"), "the marker in %s is not followed by a code block", doc)
	block, _, ok := strings.Cut(rest, "```\n")
	require.True(t, ok, "the block after the marker in %s does not end", doc)
	return block
}

// TestDocsOperatingTranscript runs every "$ oncekv ..." line of the session
// in docs/operating.md on the fixture (app.db) and on a copy of it with a
// mark's byte flipped (damaged.db), and requires the block to be exactly
// what they print; "; echo $?" prints the exit code.
func TestDocsOperatingTranscript(t *testing.T) {
	want := docBlock(t, "docs/operating.md", "TestDocsOperatingTranscript")
	dir := t.TempDir()
	require.NoError(t, os.Rename(fixture(t), filepath.Join(dir, "app.db")))
	damaged := filepath.Join(dir, "damaged.db")
	require.NoError(t, os.Rename(fixture(t), damaged))
	damageMark(t, damaged)

	var got strings.Builder
	commands := 0
	for _, line := range strings.Split(want, "\n") {
		cmdline, ok := strings.CutPrefix(line, "$ ")
		if !ok {
			continue
		}
		commands++
		got.WriteString(line + "\n")
		cmdline, echo := strings.CutSuffix(cmdline, "; echo $?")
		args := strings.Fields(cmdline)
		require.Equal(t, "oncekv", args[0], "the session runs only oncekv: %q", line)
		r := cliIn(t, dir, args[1:]...)
		got.WriteString(r.stdout + r.stderr)
		if echo {
			got.WriteString(strconv.Itoa(r.code) + "\n")
		}
	}
	require.GreaterOrEqual(t, commands, 5, "the session lost its commands")
	require.Equal(t, want, got.String(), "docs/operating.md's session is not what the commands print")
}

// TestDocsCompactionBlock runs the compaction steps of docs/disk.md, line by
// line, on a copy of the fixture named store.db: every oncekv command must
// succeed, and the store that ends up at store.db must still answer its
// keys, with the old file kept beside it.
func TestDocsCompactionBlock(t *testing.T) {
	block := docBlock(t, "docs/disk.md", "TestDocsCompactionBlock")
	dir := t.TempDir()
	require.NoError(t, os.Rename(fixture(t), filepath.Join(dir, "store.db")))

	ran := map[string]int{}
	for _, line := range strings.Split(block, "\n") {
		line, _, _ = strings.Cut(line, "#") // a comment, or a step done by hand
		for _, step := range strings.Split(line, "&&") {
			args := strings.Fields(step)
			if len(args) == 0 {
				continue
			}
			ran[args[0]]++
			switch args[0] {
			case "oncekv":
				r := cliIn(t, dir, args[1:]...)
				require.Equal(t, 0, r.code, "%s: %s%s", step, r.stdout, r.stderr)
			case "mv":
				require.Len(t, args, 3, step)
				require.NoError(t, os.Rename(filepath.Join(dir, args[1]), filepath.Join(dir, args[2])), step)
			default:
				t.Fatalf("docs/disk.md's compaction block runs %q, which this test does not know", step)
			}
		}
	}
	require.Equal(t, map[string]int{"oncekv": 2, "mv": 2}, ran, "the steps of the block changed")

	require.FileExists(t, filepath.Join(dir, "store.db.old"))
	db, err := oncekv.Open(filepath.Join(dir, "store.db"), &oncekv.Options{ReadOnly: true, Now: (&fakeClock{now: t0.Add(2 * time.Hour)}).Now})
	require.NoError(t, err)
	defer db.Close()
	m, err := db.Mark("pay", "order-1")
	require.NoError(t, err)
	require.Equal(t, []byte("ok"), m.Response)
}
