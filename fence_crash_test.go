package oncekv_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// tokenChildEnv names the store a child process of
// TestNextFenceSurvivesSIGKILL issues tokens from.
const tokenChildEnv = "ONCEKV_TEST_TOKEN_CHILD_DB"

// TestNextFenceSurvivesSIGKILL runs a child process that issues tokens as
// fast as it can and prints each one once NextFence has returned it. The
// parent kills it with SIGKILL mid-stream, reopens the store and checks
// that the next token is greater than every token the child printed: a
// token handed out is never handed out again, whenever the process dies.
func TestNextFenceSurvivesSIGKILL(t *testing.T) {
	needChildren(t)
	path := filepath.Join(t.TempDir(), "killed.db")
	var before uint64 // the greatest token any earlier run saw
	for run := range 3 {
		child, lines := startChild(t, "^TestNextFenceChildProcess$", tokenChildEnv, path)

		var printed []uint64
		want := 20 + run*37 // kill at a different point each run
		for len(printed) < want && lines.Scan() {
			token, ok := strings.CutPrefix(lines.Text(), "token ")
			if !ok {
				continue // the test framework's own lines
			}
			n, err := strconv.ParseUint(token, 10, 64)
			require.NoError(t, err)
			printed = append(printed, n)
		}
		require.NoError(t, child.kill(nil))
		var exit *exec.ExitError
		require.ErrorAs(t, child.waited, &exit, "the child must die of the signal, not finish")
		require.Len(t, printed, want, "the child stopped early")
		require.IsIncreasing(t, printed)
		require.Greater(t, printed[0], before, "run %d reissued a token of an earlier run", run)

		db, err := oncekv.Open(path, nil)
		require.NoError(t, err)
		n, err := db.NextFence("killed")
		require.NoError(t, err)
		require.NoError(t, db.Close())
		require.Greater(t, n, printed[len(printed)-1], "run %d: a token was issued again after SIGKILL", run)
		before = n
		oncetest.Check(t, path)
	}
}

// TestNextFenceChildProcess is the child of TestNextFenceSurvivesSIGKILL;
// run on its own it does nothing.
func TestNextFenceChildProcess(t *testing.T) {
	path := childOnly(t, tokenChildEnv, "TestNextFenceSurvivesSIGKILL")
	db, err := oncekv.Open(path, nil) // durable, as a real user's store
	require.NoError(t, err)
	deadline := time.Now().Add(time.Minute) // never outlive a parent that died
	for time.Now().Before(deadline) {
		n, err := db.NextFence("killed")
		require.NoError(t, err)
		fmt.Printf("token %d\n", n) // os.Stdout is unbuffered: the parent sees it at once
	}
}
