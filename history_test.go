package oncekv_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// historyDurationEnv sets how long TestHistoryLinearizable runs (a Go
// duration, for example "60s" for a soak run). Each of the adversarial
// variants in adversary_test.go runs for a quarter of it.
const historyDurationEnv = "ONCEKV_HISTORY_DURATION"

// historyDuration is the total time of the history tests: 30s for the
// plain run and 2 x 7.5s under the adversarial filters keeps all three
// inside CI's budget (about 45s of the root package's test time).
func historyDuration(t *testing.T, share float64) time.Duration {
	d := 30 * time.Second
	if testing.Short() {
		d = 2 * time.Second
	}
	if s := os.Getenv(historyDurationEnv); s != "" {
		var err error
		d, err = time.ParseDuration(s)
		require.NoError(t, err, "%s=%q", historyDurationEnv, s)
	}
	return time.Duration(float64(d) * share)
}

// TestHistoryLinearizable runs 16 goroutines against a few hot keys, with
// duplicates, key reuse, claims whose leases run out on an injected clock,
// takeovers, zombie completions and fenced writes, records every call with
// its invoke and return times, and checks the history with porcupine
// against a model of an idempotency map (per key: unseen, claimed under a
// lease and a token, done with a response, the effect's run count) plus
// fenced registers (value, fence, last issued token).
//
// The invariants the model enforces: an effect runs at most once per key;
// every duplicate gets the first response back; a live claim is never
// taken over and an expired one may be; a taken-over holder's Extend,
// Complete and Fail fail with ErrFenced and change nothing; tokens only
// grow; a fenced write lands only with a fence greater than the stored one;
// reads see the last write. Run it under -race.
func TestHistoryLinearizable(t *testing.T) {
	runHistory(t, historyDuration(t, 1), nil)
}

// histKeys and histRegs are the hot objects of one epoch: few, so that
// goroutines collide on them all the time.
const (
	histKeys    = 3
	histRegs    = 2
	histWorkers = 16
	// histOpsPerWorker bounds an epoch, so each partition of the history
	// stays a few hundred operations and porcupine checks it in
	// milliseconds. Fresh keys in every epoch keep the epochs independent.
	histOpsPerWorker = 40
)

// historySeedEnv replays the workload of a logged seed (as far as the
// goroutines' interleaving allows: each worker's choices, the adversarial
// filter's answers).
const historySeedEnv = "ONCEKV_HISTORY_SEED"

// histReach lists the outcomes ("kind/error", "+dup" for a duplicate
// Apply, "+done" for a Claim that found the key done) that every run must
// reach, so that the checked histories cover every case the model knows:
// duplicates, key reuse, conflicts with live claims, takeovers that fence
// a zombie's Extend, Complete and fenced write, stale fences. The rarest,
// a zombie's Complete fenced after a takeover, shows up about once in 60
// epochs (all were reached after 7 to 117 epochs in 12 runs).
var histReach = []string{
	"apply/ok", "apply/ok+dup", "apply/reuse", "apply/inprogress",
	"claim/ok", "claim/ok+done", "claim/reuse", "claim/inprogress",
	"extend/ok", "extend/fenced", "complete/ok", "complete/fenced", "fail/ok",
	"cput/ok", "cput/fenced", "nextfence/ok", "put/ok", "put/fenced", "read/ok",
}

// histMaxEpochs bounds a run that has not reached every case of histReach
// when its time is up: it goes on until it has, or fails after this many
// epochs. At one chance in 60 per epoch, missing a case for 2,000 epochs
// has odds of about e^-33: a failure means the workload lost a case.
const histMaxEpochs = 2000

// runHistory runs epochs of the concurrent workload for d, and on until
// every outcome of histReach has occurred, checking each epoch's history.
// adversary, when not nil, builds the hook that answers the Bloom filters
// from the run's seed.
//
// An epoch porcupine cannot decide within its time limit (Unknown, which
// says nothing about the store) is logged with the seed and left out; the
// test is skipped, naming the seed, if no epoch could be decided.
func runHistory(t *testing.T, d time.Duration, adversary func(seed uint64) func(bool) bool) {
	clock := oncetest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	path := filepath.Join(t.TempDir(), "history.db")
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true, Now: clock.Now, ExpireInterval: -1})
	require.NoError(t, err)
	defer func() {
		require.NoError(t, db.Close())
		oncetest.Check(t, path)
	}()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(historySeedEnv); s != "" {
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "%s=%q", historySeedEnv, s)
	}
	t.Logf("seed %d (set %s to replay it)", seed, historySeedEnv)
	if adversary != nil {
		oncekv.SetFilterHook(db, adversary(seed))
	}
	deadline := time.Now().Add(d)
	var epochs, ops, unknown int
	seen := map[string]int{} // outcomes of the checked epochs
	for epoch := 0; epoch == 0 || time.Now().Before(deadline) || len(unreached(seen)) > 0; epoch++ {
		require.Less(t, epoch, histMaxEpochs, "seed %d: after %d epochs the workload never reached %v; outcomes %v",
			seed, epoch, unreached(seen), seen)
		h := runEpoch(t, db, clock, epoch, seed)
		res, info := porcupine.CheckOperationsVerbose(historyModel, h, 30*time.Second)
		if res == porcupine.Unknown {
			unknown++
			t.Logf("seed %d epoch %d: porcupine could not decide within its time limit; epoch left out", seed, epoch)
			continue
		}
		if res != porcupine.Ok {
			file := filepath.Join(os.TempDir(), fmt.Sprintf("oncekv-history-%d.html", seed))
			if err := porcupine.VisualizePath(historyModel, info, file); err == nil {
				t.Logf("visualization in %s", file)
			}
			for _, op := range h {
				t.Log(historyModel.DescribeOperation(op.Input, op.Output))
			}
		}
		require.Equal(t, porcupine.Ok, res, "epoch %d (seed %d) is not linearizable", epoch, seed)
		epochs++
		ops += len(h)
		for _, op := range h {
			in, out := op.Input.(hIn), op.Output.(hOut)
			name := hKindNames[in.Kind] + "/" + histErrNames[out.Err]
			switch {
			case out.Dup:
				name += "+dup"
			case out.Done:
				name += "+done"
			}
			seen[name]++
		}
	}
	if epochs == 0 {
		t.Skipf("seed %d: porcupine decided none of %d epochs", seed, unknown)
	}
	t.Logf("%d epochs, %d operations checked: Ok (%d undecided epochs left out); outcomes %v", epochs, ops, unknown, seen)
}

// unreached returns the outcomes of histReach not in seen.
func unreached(seen map[string]int) []string {
	var missing []string
	for _, o := range histReach {
		if seen[o] == 0 {
			missing = append(missing, o)
		}
	}
	return missing
}

// hKind is an operation of the history.
type hKind uint8

const (
	hApply    hKind = iota // Apply(key, payload) with a counting effect
	hClaim                 // Claim(key, payload, lease)
	hExtend                // Claim.Extend(lease)
	hComplete              // Claim.Complete(response) with a counting effect
	hFail                  // Claim.Fail(transient error): release
	hCPut                  // PutFenced on the key's register with the claim's token
	hFence                 // NextFence(register)
	hPut                   // PutFenced(register, value, fence)
	hRead                  // read register value and fence
)

var hKindNames = [...]string{"apply", "claim", "extend", "complete", "fail", "cput", "nextfence", "put", "read"}

// hIn is an operation's input. T0 and T1 are the injected clock before
// the call and after it returned: the store read its time in between.
type hIn struct {
	Kind    hKind
	Obj     string // key or register, the partition
	Payload byte
	Lease   int64
	Token   uint64 // a claim's token, or a fence
	Value   uint64
	T0, T1  int64
}

// hErr classifies an error the model knows about.
type hErr uint8

const (
	eNone hErr = iota
	eReuse
	eInProgress
	eFenced
	eOther
)

var histErrNames = [...]string{"ok", "reuse", "inprogress", "fenced", "other"}

// hOut is an operation's output.
type hOut struct {
	Err   hErr
	Dup   bool
	Done  bool   // Claim found the key done
	Resp  string // response or stored response
	Token uint64 // Claim's token, NextFence's token
	Value uint64 // register value read, or effect count after Complete
	Fence uint64 // register fence read
	Msg   string // the error's text, for the report
}

func classify(err error) hErr {
	switch {
	case err == nil:
		return eNone
	case errors.Is(err, oncekv.ErrKeyReuse):
		return eReuse
	case errors.Is(err, oncekv.ErrInProgress):
		return eInProgress
	case errors.Is(err, oncekv.ErrFenced):
		return eFenced
	}
	return eOther
}

// keyState is the model of one key (and its fenced register) or one
// register; both are plain comparable values.
type keyState struct {
	Phase     uint8 // 0 unseen, 1 claimed, 2 done
	Payload   byte
	Token     uint64 // the current claim's token
	LastToken uint64 // greatest claim token seen for the key
	DLo, DHi  int64  // lease deadline lies in [DLo, DHi]
	Released  bool
	Resp      string
	Runs      uint64 // how many times an effect committed
	RegVal    uint64
	RegFence  uint64
	Issued    uint64 // registers: last NextFence token
}

const (
	phaseUnseen  = 0
	phaseClaimed = 1
	phaseDone    = 2
)

// mayBeExpired and mayBeLive: the store read its clock somewhere in
// [t0, t1], and the deadline lies somewhere in [DLo, DHi].
func (s keyState) mayBeExpired(in hIn) bool { return s.Released || in.T1 >= s.DLo }
func (s keyState) mayBeLive(in hIn) bool    { return !s.Released && in.T0 < s.DHi }

func stepKey(s keyState, in hIn, out hOut) (bool, keyState) {
	claimedBy := func(tok uint64) bool { return s.Phase == phaseClaimed && s.Token == tok && !s.Released }
	switch in.Kind {
	case hApply, hClaim:
		switch out.Err {
		case eReuse:
			return s.Phase != phaseUnseen && s.Payload != in.Payload, s
		case eInProgress:
			return s.Phase == phaseClaimed && s.Payload == in.Payload && s.mayBeLive(in), s
		case eNone:
		default:
			return false, s
		}
		if s.Phase == phaseDone {
			dup := out.Dup || out.Done
			return dup && s.Payload == in.Payload && out.Resp == s.Resp, s
		}
		free := s.Phase == phaseUnseen || (s.Payload == in.Payload && s.mayBeExpired(in))
		if !free || out.Dup || out.Done {
			return false, s
		}
		s.Payload, s.Released = in.Payload, false
		if in.Kind == hApply {
			if out.Resp != strconv.FormatUint(s.Runs+1, 10) {
				return false, s // the effect ran more than once
			}
			s.Phase, s.Resp, s.Runs = phaseDone, out.Resp, s.Runs+1
			return true, s
		}
		if out.Token <= s.LastToken {
			return false, s
		}
		s.Phase, s.Token, s.LastToken = phaseClaimed, out.Token, out.Token
		s.DLo, s.DHi = in.T0+in.Lease, in.T1+in.Lease
		return true, s
	case hExtend:
		if out.Err == eFenced {
			return !claimedBy(in.Token), s
		}
		if out.Err != eNone || !claimedBy(in.Token) {
			return false, s
		}
		s.DLo, s.DHi = in.T0+in.Lease, in.T1+in.Lease
		return true, s
	case hComplete:
		if out.Err == eFenced {
			return !claimedBy(in.Token), s
		}
		if out.Err != eNone || !claimedBy(in.Token) || out.Value != s.Runs+1 {
			return false, s
		}
		s.Phase, s.Resp, s.Runs = phaseDone, out.Resp, s.Runs+1
		return true, s
	case hFail:
		if out.Err == eFenced {
			return !claimedBy(in.Token), s
		}
		if out.Err != eNone || !claimedBy(in.Token) {
			return false, s
		}
		s.Released = true
		return true, s
	case hCPut, hPut:
		if out.Err == eFenced {
			return in.Token <= s.RegFence, s
		}
		if out.Err != eNone || in.Token <= s.RegFence {
			return false, s
		}
		s.RegVal, s.RegFence = in.Value, in.Token
		return true, s
	case hFence:
		if out.Err != eNone || out.Token != s.Issued+1 {
			return false, s
		}
		s.Issued = out.Token
		return true, s
	case hRead:
		return out.Err == eNone && out.Value == s.RegVal && out.Fence == s.RegFence, s
	}
	return false, s
}

var historyModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range h {
			obj := op.Input.(hIn).Obj
			if _, ok := by[obj]; !ok {
				order = append(order, obj)
			}
			by[obj] = append(by[obj], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, obj := range order {
			out = append(out, by[obj])
		}
		return out
	},
	Init: func() any { return keyState{} },
	Step: func(state, input, output any) (bool, any) {
		return stepKey(state.(keyState), input.(hIn), output.(hOut))
	},
	Equal: func(a, b any) bool { return a == b },
	DescribeOperation: func(input, output any) string {
		in, out := input.(hIn), output.(hOut)
		return fmt.Sprintf("%s %s p=%d lease=%d tok=%d val=%d t=[%d,%d] -> %+v",
			hKindNames[in.Kind], in.Obj, in.Payload, in.Lease, in.Token, in.Value, in.T0, in.T1, out)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%+v", state.(keyState)) },
}

var (
	histCounts = []byte("hist-counts")
	histRegsB  = []byte("hist-regs")
)

// histWorker is one goroutine's view of an epoch.
type histWorker struct {
	db     *oncekv.DB
	clock  *oncetest.Clock
	epoch  int
	rng    *rand.Rand
	start  time.Time
	id     int
	ops    []porcupine.Operation
	fences map[string]uint64 // tokens taken and not used yet: stale by the time they are
	// unexpected lists errors the model has no place for; the test fails
	// on them after the epoch (require cannot stop a test from a goroutine).
	unexpected []string
}

// record runs call and appends it to the history.
func (w *histWorker) record(in hIn, call func(in *hIn) hOut) hOut {
	in.T0 = w.clock.Now().UnixNano()
	began := time.Since(w.start).Nanoseconds()
	out := call(&in)
	ended := time.Since(w.start).Nanoseconds()
	in.T1 = w.clock.Now().UnixNano()
	if out.Err == eOther {
		w.unexpected = append(w.unexpected, fmt.Sprintf("%s %s: %s", hKindNames[in.Kind], in.Obj, out.Msg))
	}
	w.ops = append(w.ops, porcupine.Operation{ClientId: w.id, Input: in, Call: began, Output: out, Return: ended})
	return out
}

func (w *histWorker) key() string { return fmt.Sprintf("e%d/k%d", w.epoch, w.rng.IntN(histKeys)) }
func (w *histWorker) reg() string { return fmt.Sprintf("e%d/r%d", w.epoch, w.rng.IntN(histRegs)) }

// countEffect is the counting, non-idempotent effect: it bumps the key's
// run count and returns it.
func countEffect(key string, runs *uint64) func(tx *oncekv.Tx) error {
	return func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(histCounts)
		if err != nil {
			return err
		}
		n := readUint(b.Get([]byte(key))) + 1
		*runs = n
		return b.Put([]byte(key), uintBytes(n))
	}
}

func withOut(err error) hOut { return hOut{Err: classify(err), Msg: fmt.Sprint(err)} }

func (w *histWorker) apply(ctx context.Context) {
	in := hIn{Kind: hApply, Obj: w.key()}
	if w.rng.IntN(20) == 0 {
		in.Payload = 1 // a reused key
	}
	w.record(in, func(in *hIn) hOut {
		var runs uint64
		count := countEffect(in.Obj, &runs)
		res, err := w.db.Apply(ctx, oncekv.Request{Handler: "h", Key: in.Obj, Payload: []byte{in.Payload}},
			func(tx *oncekv.Tx) ([]byte, error) {
				if err := count(tx); err != nil {
					return nil, err
				}
				return strconv.AppendUint(nil, runs, 10), nil
			})
		out := withOut(err)
		out.Dup, out.Resp = res.Duplicate, string(res.Response)
		return out
	})
}

// claimFlow claims a key and, while it holds it, may write the key's
// fenced register, extend, stall while the clock runs (becoming a zombie
// when another worker takes over), then completes or releases it.
func (w *histWorker) claimFlow(ctx context.Context) {
	var c *oncekv.Claim
	key := w.key()
	lease := time.Duration(1+w.rng.IntN(3)) * time.Second
	out := w.record(hIn{Kind: hClaim, Obj: key, Lease: int64(lease)}, func(in *hIn) hOut {
		var err error
		c, err = w.db.Claim(ctx, oncekv.Request{Handler: "h", Key: in.Obj, Payload: []byte{0}}, lease)
		o := withOut(err)
		if err == nil {
			o.Token, o.Done = c.Token(), c.Done()
			if o.Done {
				o.Resp = string(c.Result().Response)
			}
		}
		return o
	})
	if out.Err != eNone || out.Done {
		return
	}
	tok := out.Token
	for steps := w.rng.IntN(4); steps > 0; steps-- {
		var o hOut
		switch w.rng.IntN(4) {
		case 0:
			w.clock.Advance(time.Duration(w.rng.IntN(1500)) * time.Millisecond) // a stall
			continue
		case 1:
			o = w.record(hIn{Kind: hCPut, Obj: key, Token: tok, Value: w.rng.Uint64N(1000)}, func(in *hIn) hOut {
				return withOut(w.db.Update(func(tx *oncekv.Tx) error {
					b, err := tx.CreateBucketIfNotExists(histRegsB)
					if err != nil {
						return err
					}
					return b.PutFenced([]byte(in.Obj), uintBytes(in.Value), in.Token)
				}))
			})
		default:
			ext := time.Duration(1+w.rng.IntN(2)) * time.Second
			o = w.record(hIn{Kind: hExtend, Obj: key, Token: tok, Lease: int64(ext)}, func(in *hIn) hOut {
				return withOut(c.Extend(ctx, ext))
			})
		}
		if o.Err == eFenced && w.rng.IntN(2) == 0 {
			return // a well-behaved zombie gives up; the other half keeps trying
		}
	}
	if w.rng.IntN(4) == 0 {
		w.record(hIn{Kind: hFail, Obj: key, Token: tok}, func(in *hIn) hOut {
			return withOut(c.Fail(ctx, errors.New("upstream 503")))
		})
		return
	}
	w.record(hIn{Kind: hComplete, Obj: key, Token: tok}, func(in *hIn) hOut {
		var runs uint64
		resp := []byte("tok" + strconv.FormatUint(in.Token, 10))
		_, err := c.Complete(ctx, resp, countEffect(in.Obj, &runs))
		o := withOut(err)
		if err == nil {
			o.Resp, o.Value = string(resp), runs
		}
		return o
	})
}

// fenceFlow takes a fencing token for a register and writes with it, or
// with a token it took earlier and that a newer writer may have beaten.
func (w *histWorker) fenceFlow() {
	reg := w.reg()
	out := w.record(hIn{Kind: hFence, Obj: reg}, func(in *hIn) hOut {
		tok, err := w.db.NextFence(in.Obj)
		o := withOut(err)
		o.Token = tok
		return o
	})
	if out.Err != eNone {
		return
	}
	f := out.Token
	if old, ok := w.fences[reg]; ok && w.rng.IntN(2) == 0 {
		f = old // a writer that stalled after taking its token
	}
	w.fences[reg] = out.Token
	w.record(hIn{Kind: hPut, Obj: reg, Token: f, Value: w.rng.Uint64N(1000)}, func(in *hIn) hOut {
		return withOut(w.db.Update(func(tx *oncekv.Tx) error {
			b, err := tx.CreateBucketIfNotExists(histRegsB)
			if err != nil {
				return err
			}
			return b.PutFenced([]byte(in.Obj), uintBytes(in.Value), in.Token)
		}))
	})
}

func (w *histWorker) read() {
	w.record(hIn{Kind: hRead, Obj: w.reg()}, func(in *hIn) hOut {
		var o hOut
		err := w.db.View(func(tx *oncekv.Tx) error {
			if b := tx.Bucket(histRegsB); b != nil {
				o.Value, o.Fence = readUint(b.Get([]byte(in.Obj))), b.Fence([]byte(in.Obj))
			}
			return nil
		})
		o.Err, o.Msg = classify(err), fmt.Sprint(err)
		return o
	})
}

// runEpoch runs histWorkers goroutines for one epoch on fresh keys and
// returns their merged history.
func runEpoch(t *testing.T, db *oncekv.DB, clock *oncetest.Clock, epoch int, seed uint64) []porcupine.Operation {
	ctx := context.Background()
	start := time.Now()
	workers := make([]*histWorker, histWorkers)
	var wg sync.WaitGroup
	for i := range workers {
		w := &histWorker{db: db, clock: clock, epoch: epoch, id: i, start: start,
			rng: rand.New(rand.NewPCG(seed, uint64(epoch*histWorkers+i))), fences: map[string]uint64{}}
		workers[i] = w
		wg.Go(func() {
			for range histOpsPerWorker {
				switch r := w.rng.IntN(100); {
				case r < 10:
					w.clock.Advance(time.Duration(w.rng.IntN(800)) * time.Millisecond)
				case r < 45:
					w.apply(ctx)
				case r < 70:
					w.claimFlow(ctx)
				case r < 90:
					w.fenceFlow()
				default:
					w.read()
				}
			}
		})
	}
	wg.Wait()
	var h []porcupine.Operation
	for _, w := range workers {
		require.Empty(t, w.unexpected, "worker %d", w.id)
		h = append(h, w.ops...)
	}
	return h
}
