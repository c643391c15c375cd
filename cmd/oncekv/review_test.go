package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
