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

// clockChildEnv tells a re-executed test binary to run clockChild.
const clockChildEnv = "ONCEKV_CLOCK_CHILD_DB"

// clockStart is where the clock child's clock starts.
var clockStart = epoch.Add(9 * time.Hour)

// TestClockHighWaterSurvivesSIGKILL: a child claims a key, its clock moves
// past the lease's end, it writes something else and is killed with
// SIGKILL. Reopened on a clock stepped back to inside the old lease, the
// store does not revive the lease: the key is taken over at once.
func TestClockHighWaterSurvivesSIGKILL(t *testing.T) {
	if isChild(clockChildEnv, clockChild) {
		return
	}
	needChildren(t)
	for _, tc := range []struct{ lease, past, back time.Duration }{
		{time.Minute, 29 * time.Minute, 30 * time.Second},
		{10 * time.Second, 5 * time.Second, 9 * time.Second},
		{2 * time.Hour, 3 * time.Hour, time.Hour},
	} {
		t.Run(fmt.Sprintf("lease-%v-seen-expired-%v-later-back-to-%v", tc.lease, tc.past, tc.back), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.db")
			spec := fmt.Sprintf("%s|%d|%d", path, tc.lease, tc.past)
			child, lines := startChild(t, "^TestClockHighWaterSurvivesSIGKILL$", clockChildEnv, spec)
			require.True(t, lines.Scan(), "the child said nothing")
			require.Equal(t, "READY", lines.Text())
			require.NoError(t, child.kill(nil))

			clock := oncetest.NewClock(clockStart.Add(tc.back)) // stepped back to inside the old lease
			db, err := oncekv.Open(path, timeOpts(clock, time.Hour, 24*time.Hour))
			require.NoError(t, err)
			defer db.Close()
			c, err := db.Claim(context.Background(), oncekv.Request{Handler: "h", Key: "job"}, time.Minute)
			require.NoError(t, err, "the lease had run out before the crash")
			require.Greater(t, c.Token(), uint64(1))
		})
	}
}

// clockChild claims "job" at clockStart for a lease, moves its clock past
// the lease's end, applies another key, says READY and waits to be killed.
func clockChild(spec string) {
	parts := strings.Split(spec, "|")
	lease, _ := strconv.ParseInt(parts[1], 10, 64)
	past, _ := strconv.ParseInt(parts[2], 10, 64)
	clock := oncetest.NewClock(clockStart)
	db, err := oncekv.Open(parts[0], timeOpts(clock, time.Hour, 24*time.Hour))
	if err == nil {
		_, err = db.Claim(context.Background(), oncekv.Request{Handler: "h", Key: "job"}, time.Duration(lease))
	}
	if err == nil {
		clock.Advance(time.Duration(lease + past))
		_, err = db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "later"}, nil)
	}
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	fmt.Println("READY")
	select {}
}
