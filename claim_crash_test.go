package oncekv_test

import (
	"bufio"
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

// claimChildEnv names the directory of the store and the fake gateway a
// re-executed test binary works in as TestClaimHolderChild.
const claimChildEnv = "ONCEKV_CLAIM_CHILD_DIR"

// charge is the claim tests' payment.
var charge = oncekv.Request{Handler: "charge", Key: "order-7", Payload: []byte(`{"amount":100}`)}

// gateway is a fake payment gateway outside both processes: a file of the
// charges it made, one line "key token" each. It deduplicates on the
// idempotency key (a second call with a key it has charged returns the
// first receipt) and fences on the token (it refuses a token older than
// the newest it has seen for the key), as SPEC section 4 asks of the far
// side.
type gateway struct{ path string }

func (g gateway) lines(t testing.TB) [][2]string {
	raw, err := os.ReadFile(g.path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var out [][2]string
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			out = append(out, [2]string{f[0], f[1]})
		}
	}
	return out
}

// charge makes the charge for key, once.
func (g gateway) charge(t testing.TB, key string, token uint64) string {
	for _, l := range g.lines(t) {
		n, err := strconv.ParseUint(l[1], 10, 64)
		require.NoError(t, err)
		if l[0] == key {
			require.GreaterOrEqual(t, token, n, "the gateway refuses a stale token")
			return "receipt of " + l[0]
		}
	}
	f, err := os.OpenFile(g.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	_, err = fmt.Fprintf(f, "%s %d\n", key, token)
	require.NoError(t, err)
	require.NoError(t, f.Sync()) // the charge happened, whatever happens to the caller next
	require.NoError(t, f.Close())
	return "receipt of " + key
}

// TestClaimHolderChild is the worker the kill tests run in a child process:
// it claims the charge with a long lease, calls the gateway, says so, and
// waits to be killed before it can Complete. Run directly, it skips.
func TestClaimHolderChild(t *testing.T) {
	dir := childOnly(t, claimChildEnv, "the claim kill tests")
	db, err := oncekv.Open(filepath.Join(dir, "store.db"), &oncekv.Options{ExpireInterval: -1})
	require.NoError(t, err)
	c, err := db.Claim(context.Background(), charge, time.Hour)
	require.NoError(t, err)
	require.False(t, c.Done())
	gateway{filepath.Join(dir, "gateway")}.charge(t, c.Key(), c.Token())
	fmt.Printf("CALLED %s %d\n", c.Key(), c.Token())
	select {} // killed here, between the external call and Complete
}

// killHolder runs TestClaimHolderChild in dir and SIGKILLs it right after
// its gateway call. It returns the key and token the child used.
func killHolder(t *testing.T, dir string) (string, uint64) {
	t.Helper()
	child, lines := startChild(t, "^TestClaimHolderChild$", claimChildEnv, dir)
	key, token := waitCalled(t, lines)
	require.NoError(t, child.kill(nil))
	return key, token
}

func waitCalled(t *testing.T, lines *bufio.Scanner) (string, uint64) {
	t.Helper()
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) == 3 && f[0] == "CALLED" {
			token, err := strconv.ParseUint(f[2], 10, 64)
			require.NoError(t, err)
			return f[1], token
		}
	}
	require.FailNow(t, "the child ended without calling the gateway")
	return "", 0
}

// TestClaimKilledBetweenCallAndCompleteChargesOnce kills a worker, a real
// process, after its gateway call and before Complete. The next worker
// takes the claim over with a greater token, calls the gateway again with
// Claim.Key, and the gateway, which deduplicates on that key, charges once.
// Had it been handed the token as its idempotency key, it would have seen
// two different keys and charged twice.
func TestClaimKilledBetweenCallAndCompleteChargesOnce(t *testing.T) {
	needChildren(t)
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("KeepOrphanedClaims=%v", keep), func(t *testing.T) {
			dir := t.TempDir()
			gw := gateway{filepath.Join(dir, "gateway")}
			deadKey, deadToken := killHolder(t, dir)

			// Past the child's hour-long lease, so that with
			// KeepOrphanedClaims too the key can be taken over.
			clock := oncetest.NewClock(time.Now().Add(2 * time.Hour))
			db, err := oncekv.Open(filepath.Join(dir, "store.db"),
				&oncekv.Options{ExpireInterval: -1, Now: clock.Now, KeepOrphanedClaims: keep})
			require.NoError(t, err)
			defer func() { require.NoError(t, db.Close()) }()
			ctx := context.Background()
			c, err := db.Claim(ctx, charge, time.Minute)
			require.NoError(t, err)
			require.Greater(t, c.Token(), deadToken, "a takeover gets a greater token")
			require.Equal(t, deadKey, c.Key(), "the key is the same for the taker")
			receipt := gw.charge(t, c.Key(), c.Token())
			res, err := c.Complete(ctx, []byte(receipt), nil)
			require.NoError(t, err)
			require.Equal(t, "receipt of "+deadKey, string(res.Response))

			require.Len(t, gw.lines(t), 1, "one charge, though two workers called the gateway")
			require.NotEqual(t, strconv.FormatUint(deadToken, 10), strconv.FormatUint(c.Token(), 10),
				"keyed on tokens, the gateway would have charged twice")
			again, err := db.Claim(ctx, charge, time.Minute)
			require.NoError(t, err)
			require.True(t, again.Done())
			require.Len(t, gw.lines(t), 1)
		})
	}
}
