package oncekv_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// crashChild applies increments for keys k0, k1, ... from 8 goroutines and
// prints "ACK k" once Apply has returned for k, until it is killed.
func crashChild(path string) {
	db, err := oncekv.Open(path, &oncekv.Options{ExpireInterval: -1})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	out := make(chan string, 64)
	for w := range 8 {
		go func() {
			for i := w; ; i += 8 {
				key := fmt.Sprint("k", i)
				if _, err := db.Apply(context.Background(), oncekv.Request{Handler: "crash", Key: key}, deposit("counter", 1)); err != nil {
					out <- "ERR " + err.Error()
					return
				}
				out <- "ACK " + key
			}
		}()
	}
	for line := range out {
		fmt.Println(line)
	}
}

// TestSIGKILLLosesNothingAndDuplicatesNothing kills a child process that is
// applying increments with SIGKILL, several times over the same file, and
// checks after each kill: every acknowledged key is a duplicate (its mark
// is durable), and the counter equals the number of keys that have marks,
// so no effect committed without its mark or the other way round.
func TestSIGKILLLosesNothingAndDuplicatesNothing(t *testing.T) {
	needChildren(t)
	path := filepath.Join(t.TempDir(), "crash.db")
	acked := map[string]bool{}
	for round := range 3 {
		child, lines := startChild(t, "^$", crashChildEnv, path)
		target := 100 + 150*round
		n := 0
		for n < target && lines.Scan() {
			line := lines.Text()
			require.True(t, strings.HasPrefix(line, "ACK "), "child said %q", line)
			acked[strings.TrimPrefix(line, "ACK ")] = true
			n++
		}
		require.NoError(t, child.kill(func(line string) { // acknowledgements already written before the kill
			if strings.HasPrefix(line, "ACK ") {
				acked[strings.TrimPrefix(line, "ACK ")] = true
			}
		}))

		db, err := oncekv.Open(path, &oncekv.Options{ExpireInterval: -1, OpenTimeout: 10 * time.Second})
		require.NoError(t, err)
		marked := 0
		maxKey := 0
		for k := range acked {
			i, _ := strconv.Atoi(strings.TrimPrefix(k, "k"))
			maxKey = max(maxKey, i)
		}
		for i := 0; i <= maxKey+8*4; i++ {
			// Probe with an effect that refuses to run: a duplicate proves
			// a mark, the refusal proves none and rolls back, so probing
			// changes nothing.
			key := fmt.Sprint("k", i)
			res, err := db.Apply(context.Background(), oncekv.Request{Handler: "crash", Key: key}, func(tx *oncekv.Tx) ([]byte, error) {
				return nil, errNotApplied
			})
			if err == nil {
				require.True(t, res.Duplicate)
				marked++
				continue
			}
			require.ErrorIs(t, err, errNotApplied)
			require.False(t, acked[key], "acknowledged key %s lost its mark", key)
		}
		require.Equal(t, uint64(marked), balance(t, db, "counter"),
			"every committed effect has its mark and every mark its effect")
		require.NoError(t, db.Close())
		oncetest.Check(t, path)
	}
}

var errNotApplied = fmt.Errorf("probe: not applying")
