package oncetest

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// This file is the invariant check of issue 6, for crash and fault tests
// that run a workload (often in a child process that dies), then reopen the
// file and ask whether the store kept its promise. A test:
//
//  1. builds a workload of Ops (Workload, or its own) and records every op
//     it issues in a Ledger, and every acknowledgement the workload gave
//     (Ledger.Ack, or Ledger.ParseLine for an "ACK" line of AckLine);
//  2. runs each op with Op.Run, which applies the canonical effect: it
//     counts the op's own runs and adds Op.Delta to a total, in bucket
//     EffectBucket;
//  3. calls Ledger.Check on the closed file, which fails the test on any
//     violation of:
//     - bbolt's consistency check passes and every mark decodes (Check);
//     - every acknowledged op has its effect exactly once, a DONE mark, and
//     a stored response byte-identical to the acknowledged one;
//     - every unacknowledged op has both its effect and its DONE mark, or
//     neither (an IN_PROGRESS or FAILED mark goes with no effect);
//     - the total equals the sum of the deltas of the DONE ops;
//     - replaying every op changes nothing: each DONE op comes back as a
//     duplicate with its stored response, without running its effect, and
//     the user data is byte-identical afterwards.

// EffectBucket is the user bucket the canonical effect writes to: key
// TotalKey holds the sum of the applied deltas, and "runs/<op id>" how many
// times the op's effect committed.
var EffectBucket = []byte("oncetest")

// TotalKey is the key of the running total in EffectBucket.
var TotalKey = []byte("total")

// Op is one logical operation of a workload: a (Handler, Key) whose effect
// adds Delta to the total. Ops with Claim set go through DB.Claim and
// Claim.Complete; the others through DB.Apply.
type Op struct {
	Handler string
	Key     string
	Delta   uint64
	Claim   bool
}

// NewOp returns the op of (handler, key). Delta is derived from them, so
// every delivery of the same key carries the same payload (no ErrKeyReuse).
func NewOp(handler, key string, claim bool) Op {
	h := fnv.New64a()
	h.Write([]byte(handler + "/" + key))
	return Op{Handler: handler, Key: key, Delta: 1 + h.Sum64()%7, Claim: claim}
}

// ID names the op: "handler/key".
func (o Op) ID() string { return o.Handler + "/" + o.Key }

// Request is the op's request; its payload is its delta.
func (o Op) Request() oncekv.Request {
	return oncekv.Request{Handler: o.Handler, Key: o.Key, Payload: fmt.Appendf(nil, "delta=%d", o.Delta)}
}

// ClaimLease is the lease Op.Run claims for. It is short so that a claim
// left behind by a killed process can be taken over at once after reopen.
const ClaimLease = time.Millisecond

// Run delivers the op once and returns the response to acknowledge. An
// Apply op's response names the total after its effect; a claim op's is
// fixed, since Complete takes it before the effect runs.
func (o Op) Run(ctx context.Context, db *oncekv.DB) ([]byte, error) {
	if !o.Claim {
		res, err := db.Apply(ctx, o.Request(), o.Effect)
		return res.Response, err
	}
	c, err := db.Claim(ctx, o.Request(), ClaimLease)
	if err != nil {
		return nil, err
	}
	if c.Done() {
		return c.Result().Response, nil
	}
	res, err := c.Complete(ctx, []byte(o.ID()+" completed"), func(tx *oncekv.Tx) error {
		_, err := o.effect(tx)
		return err
	})
	return res.Response, err
}

// Effect is the canonical effect as an Apply effect (an Apply op's, which
// Run applies), for a test that delivers the op another way: its response
// names the total after it.
func (o Op) Effect(tx *oncekv.Tx) ([]byte, error) {
	total, err := o.effect(tx)
	return fmt.Appendf(nil, "%s total=%d", o.ID(), total), err
}

// effect is the canonical effect: one more run of o, Delta more in total.
func (o Op) effect(tx *oncekv.Tx) (total uint64, err error) {
	b, err := tx.CreateBucketIfNotExists(EffectBucket)
	if err != nil {
		return 0, err
	}
	runs := runsKey(o.ID())
	if err := b.Put(runs, fmt.Append(nil, parseUint(b.Get(runs))+1)); err != nil {
		return 0, err
	}
	total = parseUint(b.Get(TotalKey)) + o.Delta
	return total, b.Put(TotalKey, fmt.Append(nil, total))
}

func runsKey(id string) []byte { return []byte("runs/" + id) }

func parseUint(b []byte) uint64 {
	var n uint64
	_, _ = fmt.Sscan(string(b), &n)
	return n
}

// Workload returns n ops over keys k<lo> to k<hi-1>, drawn with rng: keys
// repeat, so the workload delivers duplicates, and one key in four is a
// claim. Ops of the same key are the same op, in every workload.
func Workload(rng *rand.Rand, lo, hi, n int) []Op {
	ops := make([]Op, n)
	for i := range ops {
		k := lo + rng.IntN(hi-lo)
		// The handler follows the key, so one key is always the same op.
		claim := k%4 == 3
		handler := "apply"
		if claim {
			handler = "claim"
		}
		ops[i] = NewOp(handler, fmt.Sprint("k", k), claim)
	}
	return ops
}

// AckLine is the line a workload process prints once op id was
// acknowledged with resp: "ACK <id> <hex of resp>", "-" for a nil resp.
func AckLine(id string, resp []byte) string {
	enc := "-"
	if resp != nil {
		enc = "x" + hex.EncodeToString(resp) // the prefix keeps empty apart from nil
	}
	return "ACK " + id + " " + enc
}

// IssueLine is the line a workload process prints before it delivers op:
// "ISSUE <handler> <key> <claim 0|1>".
func IssueLine(op Op) string {
	claim := 0
	if op.Claim {
		claim = 1
	}
	return fmt.Sprintf("ISSUE %s %s %d", op.Handler, op.Key, claim)
}

// Ledger records the ops a workload issued and the acknowledgements it
// gave, for Check. It is not safe for concurrent use.
type Ledger struct {
	ops   map[string]Op
	order []string
	acked map[string][]byte
	// conflicts lists acknowledgements of one op with different responses.
	conflicts []string
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{ops: map[string]Op{}, acked: map[string][]byte{}}
}

// Issue records that op may have been delivered (acknowledged or not).
func (l *Ledger) Issue(ops ...Op) {
	for _, op := range ops {
		if _, ok := l.ops[op.ID()]; !ok {
			l.ops[op.ID()] = op
			l.order = append(l.order, op.ID())
		}
	}
}

// Ack records that op id was acknowledged with resp. Two acknowledgements
// of one op with different responses are a violation, reported by Check.
func (l *Ledger) Ack(id string, resp []byte) {
	if prev, ok := l.acked[id]; ok && !bytes.Equal(prev, resp) {
		l.conflicts = append(l.conflicts, fmt.Sprintf("%s acknowledged with %q and %q", id, prev, resp))
	}
	l.acked[id] = resp
}

// Issued returns how many distinct ops were issued.
func (l *Ledger) Issued() int { return len(l.ops) }

// Acked returns how many distinct ops were acknowledged.
func (l *Ledger) Acked() int { return len(l.acked) }

// ParseLine records the op of an IssueLine or the acknowledgement of an
// AckLine. It reports false for any other line.
func (l *Ledger) ParseLine(line string) bool {
	f := strings.Fields(line)
	if len(f) == 4 && f[0] == "ISSUE" {
		l.Issue(NewOp(f[1], f[2], f[3] == "1"))
		return true
	}
	if len(f) != 3 || f[0] != "ACK" {
		return false
	}
	var resp []byte
	if f[2] != "-" {
		b, err := hex.DecodeString(strings.TrimPrefix(f[2], "x"))
		if err != nil {
			return false
		}
		resp = b
	}
	l.Ack(f[1], resp)
	return true
}

// errProbe is the effect Check replays with: it never commits.
var errProbe = errors.New("oncetest: probe, not applying")

// Check reopens the closed store at path and fails t on any violation of
// the invariants listed at the top of this file. opts may be nil; Check
// disables background expiry and waits up to 10 s for the file's lock.
// It returns how many ops were DONE.
func (l *Ledger) Check(t testing.TB, path string, opts *oncekv.Options) int {
	t.Helper()
	Check(t, path)
	var o oncekv.Options
	if opts != nil {
		o = *opts
	}
	o.ExpireInterval, o.OpenTimeout = -1, 10*time.Second
	db, err := oncekv.Open(path, &o)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	require.Empty(t, l.conflicts, "acknowledged responses disagree")

	before := dumpUserData(t, db)
	runs := map[string]uint64{}
	var total uint64
	if b := before[string(EffectBucket)]; b != nil {
		for k, v := range b {
			if id, ok := strings.CutPrefix(k, "runs/"); ok {
				runs[id] = parseUint([]byte(v))
			}
		}
		total = parseUint([]byte(b[string(TotalKey)]))
	}

	var sum uint64
	done := 0
	for _, id := range l.order {
		op := l.ops[id]
		ran := false
		res, err := db.Apply(context.Background(), op.Request(), func(*oncekv.Tx) ([]byte, error) {
			ran = true
			return nil, errProbe
		})
		isDone := err == nil
		switch {
		case isDone:
			require.True(t, res.Duplicate, "%s: replay applied again", id)
			require.False(t, ran, "%s: replay ran the effect of a DONE op", id)
			sum += op.Delta
			done++
		case errors.Is(err, errProbe), errors.Is(err, oncekv.ErrInProgress), errors.Is(err, oncekv.ErrFailed):
			// No DONE mark: none, a claim still in progress, or FAILED.
		default:
			require.NoError(t, err, "%s: replay", id)
		}
		resp, acked := l.acked[id]
		switch {
		case acked:
			require.True(t, isDone, "%s: acknowledged but has no DONE mark (err %v)", id, err)
			require.Equal(t, uint64(1), runs[id], "%s: acknowledged, effect ran %d times", id, runs[id])
			require.Equal(t, resp == nil, res.Response == nil, "%s: nil and empty response mixed up", id)
			require.True(t, bytes.Equal(resp, res.Response), "%s: stored response %q, acknowledged %q", id, res.Response, resp)
		case isDone:
			require.Equal(t, uint64(1), runs[id], "%s: DONE mark but effect ran %d times", id, runs[id])
		default:
			require.Zero(t, runs[id], "%s: effect committed without a DONE mark", id)
		}
	}
	for id, n := range runs {
		_, known := l.ops[id]
		require.True(t, known, "effect of %s, which no one issued", id)
		require.LessOrEqual(t, n, uint64(1), "%s: effect ran %d times", id, n)
	}
	require.Equal(t, sum, total, "total is not the sum of the DONE ops' deltas")
	require.Equal(t, before, dumpUserData(t, db), "replaying every op changed the user data")
	return done
}

// dumpUserData copies every user bucket: name -> key -> value.
func dumpUserData(t testing.TB, db *oncekv.DB) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		return tx.ForEachBucket(func(name []byte) error {
			m := map[string]string{}
			out[string(name)] = m
			return tx.Bucket(name).ForEach(func(k, v []byte) error {
				m[string(k)] = string(v)
				return nil
			})
		})
	}))
	return out
}
