package edgeagent_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	edgeagent "github.com/oncekv/oncekv/examples/edge-agent"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
	"github.com/oncekv/oncekv/retry"
)

// The child agent's environment.
const (
	envChild = "EDGE_AGENT_CHILD" // the store's path
	envURL   = "EDGE_AGENT_URL"
	envFrom  = "EDGE_AGENT_FROM" // the readings it records: [from, to)
	envTo    = "EDGE_AGENT_TO"
)

// The agent's budget, which the outage check holds it to.
const (
	budgetWindow = 2 * time.Second
	budgetRatio  = 0.1
	budgetFloor  = 5.0 // retries per second
)

func TestMain(m *testing.M) {
	if path := os.Getenv(envChild); path != "" {
		os.Exit(childAgent(path))
	}
	os.Exit(m.Run())
}

func readingID(i int) string { return fmt.Sprintf("r%05d", i) }

// childAgent is the device: it records its readings (each twice, as a
// chattering sensor would), relays them until the outbox is empty and
// exits 0; 3 if anything was dead-lettered. The test SIGKILLs it at
// random moments.
func childAgent(path string) int {
	from, _ := strconv.Atoi(os.Getenv(envFrom))
	to, _ := strconv.Atoi(os.Getenv(envTo))
	budget, err := retry.NewBudget(&retry.BudgetOptions{Window: budgetWindow, Ratio: budgetRatio, MinPerSecond: budgetFloor})
	if err != nil {
		return 2
	}
	a, err := edgeagent.Open(path, os.Getenv(envURL), &edgeagent.Options{
		// NoSync: SIGKILL keeps what the kernel was given; power loss is
		// another test.
		Store: &oncekv.Options{NoSync: true},
		// KeepOrphanedLeases: the check holds every retry to the server's
		// Retry-After across kills too, and a lease released at the next
		// Open would send at once an attempt whose 503 the killed process
		// got but never recorded; waiting the 3s lease out honours the 1s.
		Queue: &queue.Options{Visibility: 3 * time.Second, KeepOrphanedLeases: true,
			Retry: &retry.Policy{Base: 200 * time.Millisecond, Cap: 2 * time.Second, MaxAttempts: -1}},
		Relay: &relay.Options{Workers: 4, SendTimeout: time.Second, Budget: budget},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	defer a.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	for i := from; i < to; i++ {
		r := edgeagent.Reading{ID: readingID(i), Sensor: fmt.Sprintf("s%d", i%7), Value: float64(i) / 10}
		for range 2 {
			if _, err := a.Record(ctx, r); err != nil {
				fmt.Fprintln(os.Stderr, "child:", err)
				return 2
			}
		}
	}
	for {
		st, err := a.Queue().Stats()
		if err != nil {
			return 2
		}
		if st.Dead > 0 {
			return 3
		}
		if st.Depth == 0 {
			cancel()
			<-done
			return 0
		}
		select {
		case err := <-done:
			fmt.Fprintln(os.Stderr, "child: relay stopped:", err)
			return 2
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// chaos sits in front of the ingest server: it answers 503 and 429 with
// Retry-After, lets requests through and then drops the connection before
// the answer, and checks every arrival against the Retry-After its key was
// given.
type chaos struct {
	srv *edgeagent.Server
	mu  sync.Mutex
	rng *rand.Rand
	// outage answers every request 503, and logs arrivals.
	outage    bool
	arrivals  []arrival
	notBefore map[string]time.Time // key -> earliest next arrival allowed
	seen      map[string]bool
	requests  int
	faults    struct{ unavailable, tooMany, dropped int }
	replays   int
	tooEarly  []string
}

type arrival struct {
	at    time.Time
	first bool
}

func newChaos(srv *edgeagent.Server, seed uint64) *chaos {
	return &chaos{srv: srv, rng: rand.New(rand.NewPCG(seed, 1)),
		notBefore: map[string]time.Time{}, seen: map[string]bool{}}
}

func (c *chaos) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	now := time.Now()
	c.mu.Lock()
	c.requests++
	if nb, ok := c.notBefore[key]; ok && now.Before(nb) {
		c.tooEarly = append(c.tooEarly, fmt.Sprintf("%s came %v before its Retry-After", key, nb.Sub(now)))
	}
	delete(c.notBefore, key)
	first := !c.seen[key]
	c.seen[key] = true
	roll := c.rng.Float64()
	if c.outage {
		c.arrivals = append(c.arrivals, arrival{now, first})
		roll = 0
	}
	var code int
	switch {
	case roll < 0.12:
		code = http.StatusServiceUnavailable
		c.faults.unavailable++
	case roll < 0.2:
		code = http.StatusTooManyRequests
		c.faults.tooMany++
	}
	if code != 0 {
		// The floor is set before the answer leaves, so any retry that
		// honours it arrives after it.
		c.notBefore[key] = time.Now().Add(time.Second)
		c.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(code)
		return
	}
	drop := roll < 0.3
	c.mu.Unlock()

	rec := httptest.NewRecorder()
	c.srv.ServeHTTP(rec, r)
	c.mu.Lock()
	if rec.Header().Get("Idempotent-Replayed") == "true" {
		c.replays++
	}
	if s := rec.Header().Get("Retry-After"); s != "" { // idemhttp's 409
		if d, err := retry.ParseRetryAfter(s, time.Now()); err == nil {
			c.notBefore[key] = time.Now().Add(d)
		}
	}
	if drop {
		c.faults.dropped++
	}
	c.mu.Unlock()
	if drop {
		// Processed and committed, and the answer never leaves: the
		// lost ack.
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func (c *chaos) setOutage(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.outage = on
}

// agent starts a child agent recording readings [from, to).
func agent(t *testing.T, path, url string, from, to int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+path, envURL+"="+url,
		envFrom+"="+strconv.Itoa(from), envTo+"="+strconv.Itoa(to))
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	return cmd
}

// finish waits up to limit for a child that must drain its outbox and
// exit 0.
func finish(t *testing.T, cmd *exec.Cmd, limit time.Duration) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- cmd.Wait() }()
	select {
	case err := <-errc:
		require.NoError(t, err, "the agent must drain its outbox with no dead letter")
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		require.FailNow(t, "the agent did not drain its outbox")
	}
}

// TestChaosEveryReadingAppliedOnce: readings recorded by an agent that is
// SIGKILLed at random, relayed to a server that fails, throttles and drops
// answers, are each applied exactly once; every retry honours the
// server's Retry-After; and under a full outage the retries stay within
// the budget. EDGE_AGENT_SOAK=1 runs it ten times longer.
func TestChaosEveryReadingAppliedOnce(t *testing.T) {
	readings, kills, outageReadings, limit := 200, 15, 100, 2*time.Minute
	if os.Getenv("EDGE_AGENT_SOAK") != "" {
		// Draining takes longer too: past the first attempts, retries
		// come at the budget's floor.
		readings, kills, outageReadings, limit = 2000, 150, 1000, 20*time.Minute
	}
	dir := t.TempDir()
	sdb, err := oncekv.Open(filepath.Join(dir, "server.db"), &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	defer sdb.Close()
	srv, err := edgeagent.NewServer(sdb)
	require.NoError(t, err)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ch := newChaos(srv, seed)
	hs := httptest.NewServer(ch)
	defer hs.Close()
	path := filepath.Join(dir, "agent.db")
	rng := rand.New(rand.NewPCG(seed, 2))

	// Phase 1: faults, and SIGKILL at random moments.
	for range kills {
		cmd := agent(t, path, hs.URL, 0, readings)
		time.Sleep(time.Duration(50+rng.IntN(450)) * time.Millisecond) // chaos timing, not a wait for expiry
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
	}
	finish(t, agent(t, path, hs.URL, 0, readings), limit)

	// Phase 2: a full outage while a new batch arrives, then recovery.
	ch.setOutage(true)
	cmd := agent(t, path, hs.URL, readings, readings+outageReadings)
	const outage = 4 * time.Second
	time.Sleep(outage) // the outage's length on the server's side
	ch.setOutage(false)
	finish(t, cmd, limit)

	applied, err := srv.Applied()
	require.NoError(t, err)
	var lost, twice []string
	for i := range readings + outageReadings {
		switch n := applied[readingID(i)]; {
		case n == 0:
			lost = append(lost, readingID(i))
		case n > 1:
			twice = append(twice, readingID(i))
		}
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	firsts, retries := 0, 0
	perSecond := map[int]int{}
	for _, a := range ch.arrivals {
		if a.first {
			firsts++
		} else {
			retries++
		}
		perSecond[int(a.at.Sub(ch.arrivals[0].at)/time.Second)]++
	}
	// The budget allows, per window, Ratio of the first attempts counted
	// in it plus the floor; a first attempt counts in at most two
	// disjoint windows.
	retryBound := int(2*budgetRatio*float64(firsts) + budgetFloor*(outage+budgetWindow).Seconds())
	violations := len(lost) + len(twice) + len(ch.tooEarly)
	if retries > retryBound {
		violations++
	}
	dups := sdb.Stats().Handlers["idemhttp"].DuplicatesSuppressed
	t.Logf("readings %d, kills %d, requests %d, server faults: 503 %d, 429 %d, dropped after processing %d; "+
		"duplicates the server suppressed %d (replays seen %d); violations %d",
		readings+outageReadings, kills, ch.requests, ch.faults.unavailable, ch.faults.tooMany, ch.faults.dropped,
		dups, ch.replays, violations)
	t.Logf("outage of %v: %d first attempts, %d retries (budget bound %d); requests per second %v",
		outage, firsts, retries, retryBound, perSecond)
	require.Empty(t, lost, "readings never applied")
	require.Empty(t, twice, "readings applied twice")
	require.Empty(t, ch.tooEarly, "retries before the server's Retry-After")
	require.LessOrEqual(t, retries, retryBound, "retries under the outage beyond the budget")
	require.NotZero(t, ch.faults.dropped)
	require.NotZero(t, ch.replays, "a dropped answer's retry must meet a replay")
}
