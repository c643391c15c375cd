package idemhttptest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/idemhttp"
)

// testReplicaTakeoverFencesTheLateAnswer: two middlewares on one store,
// as two replicas of a service. A request stalls on the first past its
// lease (no heartbeat in time, as a paused process); during the lease a
// retry on the second gets 409 with Retry-After from the lease's end,
// after it the retry takes the key over and answers. The stalled
// handler's late answer is fenced: it stores nothing, its staged write
// does not commit, and both replicas replay the taker's answer.
func testReplicaTakeoverFencesTheLateAnswer(t *testing.T, e *env) {
	opts := &idemhttp.Options{Lease: 2 * time.Hour, Heartbeat: time.Hour}
	var runs atomic.Int64
	started, resume := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			e.put(t, r, "orders", "stalled", "paid")
			close(started)
			<-resume
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte("stalled answer"))
			return
		}
		e.put(t, r, "orders", "taker", "paid")
		w.Header().Set("Location", "/orders/taker")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("taker's answer"))
	})
	a, b := e.serve(t, opts, h), e.serve(t, opts, h)
	c := Call{Key: "k", User: "alice"}
	late := make(chan Reply, 1)
	go func() {
		rep, _ := TrySend(context.Background(), a, c)
		late <- rep
	}()
	<-started

	e.clk.Add(30 * time.Minute)
	busy := Send(t, b, c)
	require.Equal(t, http.StatusConflict, busy.Status)
	require.Equal(t, "5400", busy.Header.Get("Retry-After"), "the lease's end, by the store's clock")

	e.clk.Add(2 * time.Hour)
	taken := Send(t, b, c)
	require.Equal(t, http.StatusCreated, taken.Status, string(taken.Body))
	require.False(t, taken.Replayed())
	require.Equal(t, "taker's answer", string(taken.Body))

	close(resume)
	stalled := <-late
	require.Equal(t, http.StatusInternalServerError, stalled.Status, "a fenced answer is not given as success")
	typ, _ := ProblemOf(t, stalled)
	require.Equal(t, idemhttp.ProblemStoreFailed, typ)
	for _, srv := range []*httptest.Server{a, b} {
		rep := Send(t, srv, c)
		require.True(t, rep.Replayed())
		require.Equal(t, "taker's answer", string(rep.Body))
		require.Equal(t, "/orders/taker", rep.Header.Get("Location"))
	}
	require.Equal(t, []string{"taker"}, e.keys(t, "orders"), "the stalled handler's write must not commit")
	require.EqualValues(t, 2, runs.Load())
}
