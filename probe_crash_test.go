package oncekv_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/layout"
)

// probeChildEnv carries the work of TestProbeUnderKillsChargesOnce's child:
// "dir|gateway URL|from|to|stall|stage": orders from..to-1, and where to
// wait to be killed (order stall, at stage "claimed" or "charged").
const probeChildEnv = "ONCEKV_PROBE_CHILD"

// ledgerGateway is a payment gateway of the old kind: it does not
// deduplicate (a second charge of a key is a second charge), but it has a
// status API, which the probe asks. Its ledger is a file of its own, one
// "key receipt" line per charge, fsynced before it answers. Its status
// API is down for the keys of down, which it answers 503.
type ledgerGateway struct {
	path string
	down map[string]bool // claim keys whose status is unavailable; set before use

	mu sync.Mutex // one charge at a time, as the ledger's lines are read and appended
	n  int
	// open counts the connections not closed yet: after a kill, the test
	// waits for none, so that no charge of the dead worker is still in
	// flight when the next one probes.
	open sync.WaitGroup
}

func (g *ledgerGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	g.mu.Lock()
	defer g.mu.Unlock()
	charges := g.charges()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/charge":
		g.n++
		receipt := fmt.Sprintf("rcpt-%d", g.n)
		f, err := os.OpenFile(g.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err == nil {
			_, err = fmt.Fprintf(f, "%s %s\n", key, receipt)
			err = errors.Join(err, f.Sync(), f.Close())
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, receipt)
	case r.URL.Path == "/status" && g.down[key]:
		http.Error(w, "status API unavailable", http.StatusServiceUnavailable)
	case r.URL.Path == "/status" && len(charges[key]) > 0:
		_, _ = io.WriteString(w, charges[key][0])
	case r.URL.Path == "/status":
		http.NotFound(w, r)
	default:
		http.Error(w, "no such call", http.StatusBadRequest)
	}
}

// charges reads the ledger: the receipts of each key's charges.
func (g *ledgerGateway) charges() map[string][]string {
	out := map[string][]string{}
	raw, err := os.ReadFile(g.path)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if key, receipt, ok := strings.Cut(line, " "); ok {
			out[key] = append(out[key], receipt)
		}
	}
	return out
}

// start serves g on 127.0.0.1, counting its connections.
func (g *ledgerGateway) start(t *testing.T) *httptest.Server {
	srv := httptest.NewUnstartedServer(g)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			g.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			g.open.Done()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// probeOrder is the i-th order of the kill test.
func probeOrder(i int) oncekv.Request {
	return oncekv.Request{Handler: "charge", Key: fmt.Sprintf("order-%d", i), Payload: []byte(fmt.Sprintf(`{"amount":%d}`, 100+i))}
}

// TestProbeUnderKillsChargesOnce runs a worker in a child process that
// claims orders with ClaimWith, charges them at a gateway that does not
// deduplicate, and completes them, and SIGKILLs it round after round: at a
// random line of its output, right after a claim and before its charge, or
// right after a charge and before its Complete. Each round brings new
// orders and redelivers the last round's. Every next worker takes the dead one's claims
// over (orphans), and its probe asks the gateway's status API. At the end
// every order was charged exactly once: no double charge (a takeover that
// charged again), no lost one (an order left uncharged, or DONE without a
// charge). In the second run the status API is down for a fifth of the
// orders: those taken over are parked, wait for the operator, and are
// resolved from the gateway's ledger.
func TestProbeUnderKillsChargesOnce(t *testing.T) {
	if isChild(probeChildEnv, probeWorker) {
		return
	}
	needChildren(t)
	rounds := 24
	if soak() {
		rounds = 300
	}
	for _, statusDown := range []bool{false, true} {
		t.Run(fmt.Sprintf("statusDown=%v", statusDown), func(t *testing.T) {
			probeKillRounds(t, rounds, statusDown)
		})
	}
}

func probeKillRounds(t *testing.T, rounds int, statusDown bool) {
	const perRound = 5
	orders := (rounds + 2) * perRound
	seed := rand.Uint64()
	t.Logf("seed %d (%d rounds)", seed, rounds)
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	gw := &ledgerGateway{path: filepath.Join(dir, "ledger"), down: map[string]bool{}}
	for i := range orders {
		if statusDown && i%5 == 0 {
			gw.down[claimKeyOf(probeOrder(i))] = true
		}
	}
	srv := gw.start(t)
	var tally struct{ kills, beforeCharge, beforeComplete, applied, notApplied, parked int }
	// run runs a worker on orders from..to-1, killed after killAfter lines
	// (0: never), or when it waits at order stall's stage.
	run := func(from, to, stall int, stage string, killAfter int) {
		child, lines := startChild(t, "^TestProbeUnderKillsChargesOnce$", probeChildEnv,
			fmt.Sprintf("%s|%s|%d|%d|%d|%s", dir, srv.URL, from, to, stall, stage))
		n, ended := 0, false
		for !ended && lines.Scan() {
			line := lines.Text()
			n++
			f := strings.Fields(line)
			switch {
			case len(f) == 3 && f[0] == "PROBE":
				switch f[2] {
				case "applied":
					tally.applied++
				case "not-applied":
					tally.notApplied++
				case "unknown":
					tally.parked++
				}
			case strings.HasPrefix(line, "FAIL "):
				t.Fatalf("the worker failed: %s", line)
			case line == "END":
				ended = true
			}
			if len(f) >= 2 && f[1] == strconv.Itoa(stall) && strings.ToLower(f[0]) == stage {
				if stage == "claimed" {
					tally.beforeCharge++
				} else {
					tally.beforeComplete++
				}
				break
			}
			if killAfter > 0 && n == killAfter {
				break
			}
		}
		if ended {
			require.NoError(t, child.cmd.Wait())
		} else {
			tally.kills++
			require.NoError(t, child.kill(nil))
		}
		gw.open.Wait() // no charge of the dead worker still in flight
	}
	if statusDown {
		run(0, 1, 0, "charged", 0) // order 0, whose status is down, is charged and its worker killed
	}
	for r := range rounds {
		from, to := max(r-1, 0)*perRound, (r+1)*perRound
		switch r % 3 {
		case 0:
			run(from, to, r*perRound+rng.IntN(perRound), "claimed", 0)
		case 1:
			run(from, to, r*perRound+rng.IntN(perRound), "charged", 0)
		default:
			run(from, to, -1, "", 1+rng.IntN(3*perRound))
		}
	}
	run(0, orders, -1, "", 0) // the last worker ends its loop

	// The operator resolves what was parked, from the gateway's ledger.
	db, err := oncekv.Open(filepath.Join(dir, "store.db"), &oncekv.Options{ExpireInterval: -1})
	require.NoError(t, err)
	charges := gw.charges()
	var parked []oncekv.MarkInfo
	require.NoError(t, db.Parked(func(m oncekv.MarkInfo) error { parked = append(parked, m); return nil }))
	for _, m := range parked {
		require.True(t, gw.down[m.ClaimKey], "only a key whose status was down is parked: %s", m.Key)
		_, err := db.Apply(context.Background(), probeOrder(orderIndex(t, m.Key)), mustNotApply(t))
		require.ErrorIs(t, err, oncekv.ErrParked, "it waits for the operator")
		if receipts := charges[m.ClaimKey]; len(receipts) > 0 {
			require.NoError(t, db.ResolveParked(m.Handler, m.Key, true, []byte(receipts[0])))
		} else {
			require.NoError(t, db.ResolveParked(m.Handler, m.Key, false, nil))
		}
	}
	require.NoError(t, db.Close())
	if statusDown {
		require.NotEmpty(t, parked, "order 0 was taken over with its status down")
	}
	run(0, orders, -1, "", 0) // and the worker finishes the orders resolved as not applied

	db, err = oncekv.Open(filepath.Join(dir, "store.db"), &oncekv.Options{ExpireInterval: -1, ReadOnly: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	charges = gw.charges()
	doubles, lost := 0, 0
	for i := range orders {
		req := probeOrder(i)
		receipts := charges[claimKeyOf(req)]
		switch len(receipts) {
		case 0:
			lost++
			continue
		case 1:
		default:
			doubles++
		}
		m, err := db.Mark(req.Handler, req.Key)
		require.NoError(t, err, req.Key)
		require.Equal(t, oncekv.MarkDone, m.State, req.Key)
		require.Equal(t, receipts[0], string(m.Response), "%s: the mark holds the gateway's receipt", req.Key)
	}
	t.Logf("%d rounds, %d kills (%d between a claim and its charge, %d between a charge and its Complete); probes: %d applied, %d not applied, %d unknown (parked, resolved by the operator); "+
		"%d orders: %d charged twice, %d lost", rounds+3, tally.kills, tally.beforeCharge, tally.beforeComplete, tally.applied, tally.notApplied, tally.parked,
		orders, doubles, lost)
	require.Zero(t, doubles, "double charges")
	require.Zero(t, lost, "lost charges")
	require.Positive(t, tally.applied, "some takeover found its charge made")
	require.Positive(t, tally.notApplied, "some takeover found its charge not made")
}

// claimKeyOf is Claim.Key of req, the key the gateway knows: the SHA-256
// of the mark key, in hex.
func claimKeyOf(req oncekv.Request) string {
	sum := sha256.Sum256(layout.MarkKey(req.Handler, req.Key))
	return hex.EncodeToString(sum[:])
}

func orderIndex(t *testing.T, key string) int {
	i, err := strconv.Atoi(strings.TrimPrefix(key, "order-"))
	require.NoError(t, err)
	return i
}

// probeWorker is the child: it opens the store and takes every order in
// turn with ClaimWith, printing what happens; it waits to be killed at
// order stall's stage: right after its claim, or right after its charge.
func probeWorker(value string) {
	parts := strings.Split(value, "|")
	from, _ := strconv.Atoi(parts[2])
	to, _ := strconv.Atoi(parts[3])
	stall, _ := strconv.Atoi(parts[4])
	stage, url := parts[5], parts[1]
	say := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	fail := func(err error) {
		say("FAIL %s", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(1)
	}
	db, err := oncekv.Open(filepath.Join(parts[0], "store.db"), &oncekv.Options{ExpireInterval: -1, OpenTimeout: 10 * time.Second})
	if err != nil {
		fail(err)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	call := func(method, path, key string) (int, string, error) {
		req, err := http.NewRequest(method, url+path+"?key="+key, nil)
		if err != nil {
			return 0, "", err
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	probe := &oncekv.ClaimOptions{Probe: func(ctx context.Context, key string, prev oncekv.Attempt) (oncekv.Outcome, []byte, error) {
		code, body, err := call(http.MethodGet, "/status", key)
		outcome := oncekv.OutcomeUnknown
		switch {
		case err != nil:
			return outcome, nil, err
		case code == http.StatusOK:
			outcome = oncekv.OutcomeApplied
		case code == http.StatusNotFound:
			outcome = oncekv.OutcomeNotApplied
		}
		say("PROBE %s %s", prev.Key, strings.ReplaceAll(outcome.String(), " ", "-"))
		return outcome, []byte(body), nil
	}}
	ctx := context.Background()
	for i := from; i < to; i++ {
		req := probeOrder(i)
		c, err := db.ClaimWith(ctx, req, time.Hour, probe)
		switch {
		case errors.Is(err, oncekv.ErrParked):
			say("PARKED %d", i)
			continue
		case err != nil:
			fail(err)
		case c.Done():
			say("DONE %d %s", i, c.Result().Response)
			continue
		}
		say("CLAIMED %d", i)
		if i == stall && stage == "claimed" {
			select {} // killed here, between the claim and the charge
		}
		code, receipt, err := call(http.MethodPost, "/charge", c.Key())
		if err != nil || code != http.StatusOK {
			fail(fmt.Errorf("charge %d: %d %v", i, code, err))
		}
		say("CHARGED %d %s", i, receipt)
		if i == stall && stage == "charged" {
			select {} // killed here, between the charge and Complete
		}
		if _, err := c.Complete(ctx, []byte(receipt), nil); err != nil {
			fail(err)
		}
		say("COMPLETED %d", i)
	}
	if err := db.Close(); err != nil {
		fail(err)
	}
	say("END")
}
