package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A load that fails part way, after some batches were written, must not
// leave a half-loaded store behind at a path it created: the operator who
// fixes the dump and runs load again would be refused ("not empty").
func TestFailedLoadLeavesNoStoreBehind(t *testing.T) {
	var dump strings.Builder
	for i := range 1500 {
		fmt.Fprintf(&dump, `{"type":"kv","bucket":"b","key":"k%d","value":"v"}`+"\n", i)
	}
	good := dump.String()
	dump.WriteString(`{"type":"nonsense"}` + "\n")
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte(dump.String()), 0o600))

	path := filepath.Join(dir, "new.db")
	r := cli(t, "load", path, bad)
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, `unknown line type "nonsense"`)
	_, err := os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist, "the store load created is removed")

	fixed := filepath.Join(dir, "good.jsonl")
	require.NoError(t, os.WriteFile(fixed, []byte(good), 0o600))
	r = cli(t, "load", path, fixed)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "1500 keys")
}

// A store file cut short by a power cut (empty, or truncated mid-file) is
// exactly what check is for: a problem found (exit 1) with a message that
// says what is wrong, not an error about a write a read-only open tried.
// Read commands say the same with exit 2, and leave the file as it was.
func TestCheckReportsATruncatedFile(t *testing.T) {
	path := fixture(t)
	whole, err := os.ReadFile(path)
	require.NoError(t, err)
	for name, size := range map[string]int{"empty": 0, "one page": 4096, "three pages": 3 * 4096} {
		t.Run(name, func(t *testing.T) {
			cut := filepath.Join(t.TempDir(), "cut.db")
			require.NoError(t, os.WriteFile(cut, whole[:size], 0o600))
			r := cli(t, "check", cut)
			require.Equal(t, 1, r.code, r.stdout+r.stderr)
			require.NotContains(t, r.stdout+r.stderr, "bad file descriptor")
			require.Contains(t, r.stdout, "cut.db")

			r = cli(t, "stats", cut)
			require.Equal(t, 2, r.code, r.stdout+r.stderr)
			require.NotContains(t, r.stderr, "bad file descriptor")
			after, err := os.ReadFile(cut)
			require.NoError(t, err)
			require.Equal(t, whole[:size], after, "a read-only command changed the file")
		})
	}
}

// expire and load go by -retention; 0 is no dedup window at all, and must
// not be taken for "whatever fits the file" (other commands' fallback,
// which halves the retention until Open accepts it): that would expire
// marks the program still deduplicates by.
func TestZeroRetentionIsRefused(t *testing.T) {
	path := fixture(t)
	before := cli(t, "marks", path, "-json")
	require.Equal(t, 0, before.code, before.stderr)
	r := cli(t, "expire", path, "-retention", "0", "-now", at(9*24*time.Hour))
	require.Equal(t, 2, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, "-retention")
	require.Equal(t, before.stdout, cli(t, "marks", path, "-json").stdout, "nothing expired")

	r = cli(t, "load", filepath.Join(t.TempDir(), "new.db"), "-", "-retention", "0")
	require.Equal(t, 2, r.code, r.stdout+r.stderr)
}
