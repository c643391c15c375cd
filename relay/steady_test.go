package relay_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/relay"
)

// TestRelaySteadyLoopIsOneCommitPerMessage: going through a backlog, a
// worker's ack of each message leases the next in the same commit, so
// the relay pays one commit per message sent (plus the first lease); a
// worker that found the queue empty waits without polling (the clock
// never moves here) and is woken by the next enqueue.
func TestRelaySteadyLoopIsOneCommitPerMessage(t *testing.T) {
	for _, workers := range []int{1, 4} {
		e := newEnv(t, nil)
		const n = 40
		e.enqueue(t, keys(n)...)
		rec := &recorder{clock: e.clock.Now}
		r := e.relay(t, rec.send, &relay.Options{Workers: workers})
		before := e.db.Stats().Commits
		run := start(r.Run)
		require.Eventually(t, func() bool { return r.Stats().Sent == n }, 20*time.Second, time.Millisecond)
		e.quiet(t)
		commits := e.db.Stats().Commits - before
		if workers == 1 {
			require.EqualValues(t, n+1, commits, "one commit per message, and the first lease")
		} else {
			require.LessOrEqual(t, commits, uint64(n+workers), "%d workers", workers)
		}

		e.enqueue(t, "late")
		require.Eventually(t, func() bool { return r.Stats().Sent == n+1 }, 20*time.Second, time.Millisecond)
		require.NoError(t, run.stop(t))
		require.Equal(t, 1, rec.count("late"))
		st := r.Stats()
		require.Zero(t, st.Fenced+st.Failed+st.Released, "%+v", st)
		require.Zero(t, e.stats(t).Depth)
	}
}
