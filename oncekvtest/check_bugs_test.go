package oncekvtest_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/oncekvtest"
)

// The article's classic bugs, planted: each test points Check at one and
// expects it to fail with the smallest counterexample, naming the bug.

// plantedShrinkRuns bounds rapid's shrinking of the planted bugs'
// failures, for CI's time (under -race a case costs a few milliseconds);
// the reducer takes the case the rest of the way.
const plantedShrinkRuns = 50

// planted is s with the shrinking bounded.
func planted[M any](s oncekvtest.Spec[M]) oncekvtest.Spec[M] {
	s.MaxShrinkRuns = plantedShrinkRuns
	return s
}

// plantedCrash is s made small for CheckCrash, whose cases start child
// processes: one message delivered at most twice (nothing to shrink, and
// the reducer still runs), and 20 cases, which all miss a bug one delivery
// in two catches once in a million runs or so.
func plantedCrash[M any](s oncekvtest.Spec[M]) oncekvtest.Spec[M] {
	s.MaxMessages, s.MaxCopies, s.Reorder, s.MaxShrinkRuns, s.CrashChecks = 1, 2, -1, 1, 20
	return s
}

// requireCounterexample checks what a failed check printed: rapid's
// summary with the likely cause, the counterexample's S and its diff.
func requireCounterexample(t *testing.T, out string, cause string, diffs ...string) {
	t.Helper()
	t.Logf("the checker said:\n%s", out)
	require.Contains(t, out, "[rapid] failed after")
	require.Contains(t, out, "likely cause: "+cause)
	require.Contains(t, out, "oncekvtest: counterexample:")
	for _, d := range diffs {
		require.Contains(t, out, d)
	}
}

// Mistake 1 of the article: the key is minted inside the retry loop, so
// every delivery of one deposit is a new key and adds again.
func TestCheckCatchesAKeyMintedPerDelivery(t *testing.T) {
	s := depositSpec()
	s.Request = func(d deposit) oncekv.Request {
		r := requestOf(d)
		r.Key = newUUID() // the bug
		return r
	}
	out := expectFailure(t, func(tb testing.TB) { oncekvtest.Check(tb, planted(s)) })
	requireCounterexample(t, out, "the idempotency key changes between deliveries of one message (m0's key changed)",
		"~ balances/acct-", "counterexample: 1 message,")
}

// Mistake 2: the audit log is appended to a file outside the transaction,
// so an attempt that rolls back (a crash before the commit) leaves its
// line, and the redelivery writes another.
func TestCheckCatchesAnAuditLogAppendedOutsideTheTransaction(t *testing.T) {
	out := expectFailure(t, func(tb testing.TB) { oncekvtest.Check(tb, planted(auditFileSpec())) })
	requireCounterexample(t, out, "an effect that rolled back left a trace",
		`~ audit.log: dep-`, "reference 1, duplicated 2", "(rolled back)", "counterexample: 1 message, 1 delivery")
}

// auditFileSpec is the deposit handler with an audit line per deposit in
// a file of its own, written inside the effect: outside the transaction.
func auditFileSpec() oncekvtest.Spec[deposit] {
	s := depositSpec()
	s.Effect = nil
	s.Open = func(env *oncekvtest.Env) (oncekvtest.Effect[deposit], error) {
		f, err := os.OpenFile(filepath.Join(env.Dir, "audit.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, err
		}
		env.OnClose(f.Close)
		return func(tx *oncekv.Tx, d deposit) ([]byte, error) {
			if _, err := fmt.Fprintf(f, "%s %s +%d\n", d.ID, d.Account, d.Amount); err != nil { // the bug
				return nil, err
			}
			return addToBalance(tx, d)
		}, nil
	}
	s.Snapshot = bucketsAndAuditLines
	return s
}

// bucketsAndAuditLines is every user bucket, and the audit log as a
// multiset of lines (their order is the deliveries', which may differ):
// "audit.log: <line>" = how many times it is there.
func bucketsAndAuditLines(env *oncekvtest.Env) (oncekvtest.State, error) {
	st, err := oncekvtest.Buckets(env.DB, nil)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(env.Dir, "audit.log"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	count := map[string]int{} // bounded by the lines of one run's log
	for line := range strings.Lines(string(b)) {
		count[strings.TrimSuffix(line, "\n")]++
	}
	for line, n := range count {
		st["audit.log: "+line] = strconv.Itoa(n)
	}
	return st, nil
}

// Mistake 2 again, the other way round: the audit entry is written in a
// transaction of its own once the deposit committed, so a crash between
// the two loses it.
func TestCheckCatchesAnAuditLogWrittenInAnotherTransaction(t *testing.T) {
	out := expectFailure(t, func(tb testing.TB) { oncekvtest.Check(tb, planted(auditTxSpec())) })
	requireCounterexample(t, out, "a crash right after a commit, before the ack, changed the state",
		"- audit/dep-", "(only in the reference)", "(crash after commit)", "counterexample: 1 message, 1 delivery")
}

// auditTxSpec counts an audit entry per deposit in a second
// transaction, from an OnCommit hook.
func auditTxSpec() oncekvtest.Spec[deposit] {
	s := depositSpec()
	s.Effect = nil
	s.Open = func(env *oncekvtest.Env) (oncekvtest.Effect[deposit], error) {
		db := env.DB
		return func(tx *oncekv.Tx, d deposit) ([]byte, error) {
			tx.OnCommit(func() { // the bug: a second transaction
				_ = db.Update(func(tx *oncekv.Tx) error {
					b, err := tx.CreateBucketIfNotExists([]byte("audit"))
					if err != nil {
						return err
					}
					n, _ := strconv.Atoi(string(b.Get([]byte(d.ID))))
					return b.Put([]byte(d.ID), []byte(strconv.Itoa(n+1)))
				})
			})
			return addToBalance(tx, d)
		}, nil
	}
	return s
}

// withLastDeposit is the deposit handler that also stores, per account,
// when the last deposit came, read from now: the clock in the state.
func withLastDeposit(now func(tx *oncekv.Tx) string) oncekvtest.Spec[deposit] {
	s := depositSpec()
	s.Effect = func(tx *oncekv.Tx, d deposit) ([]byte, error) {
		b, err := tx.CreateBucketIfNotExists([]byte("last_deposit"))
		if err != nil {
			return nil, err
		}
		if err := b.Put([]byte(d.Account), []byte(now(tx))); err != nil { // the bug
			return nil, err
		}
		return addToBalance(tx, d)
	}
	return s
}

// A handler that stores the store's clock (paid_at = now()) keeps a
// state that depends on when the message came.
func TestCheckCatchesTheStoreClockInTheState(t *testing.T) {
	s := withLastDeposit(func(tx *oncekv.Tx) string { return tx.Now().Format(time.RFC3339) })
	out := expectFailure(t, func(tb testing.TB) { oncekvtest.Check(tb, planted(s)) })
	requireCounterexample(t, out, "the state depends on the store's clock: S applied once with the clock 1h0m0s later",
		"~ last_deposit/acct-", `"2030-01-01T00:00:01Z"`, `"2030-01-01T01:00:01Z"`, "counterexample: 1 message, 1 delivery")
}

// A handler that stores the wall clock is not even deterministic.
func TestCheckCatchesTheWallClockInTheState(t *testing.T) {
	s := withLastDeposit(func(*oncekv.Tx) string { return time.Now().Format(time.RFC3339Nano) })
	out := expectFailure(t, func(tb testing.TB) { oncekvtest.Check(tb, planted(s)) })
	requireCounterexample(t, out, "the state is not a function of the messages", "~ last_deposit/acct-",
		"counterexample: 1 message, 1 delivery")
}

// Mistake 7: dedup does not fix reordering. Last-writer-wins without a
// fence ends on whichever message came last.
func TestCheckCatchesLastWriterWinsUnderReordering(t *testing.T) {
	out := expectFailure(t, func(tb testing.TB) {
		oncekvtest.Check(tb, planted(oncekvtest.Spec[setBalance]{Messages: sets, Request: setRequest, Effect: assignUnfenced}))
	})
	requireCounterexample(t, out, "the state depends on the order of the messages", "~ balances/acct:",
		"counterexample: 2 messages, 2 deliveries")
}

// A shrinking budget that runs out between two runs of a failing case
// must not make rapid call the test flaky: past the budget, a case that
// failed fails again without running.
func TestAShrinkBudgetThatRunsOutIsNotFlaky(t *testing.T) {
	for budget := 1; budget <= 3; budget++ {
		s := depositSpec()
		s.Request = func(d deposit) oncekv.Request {
			r := requestOf(d)
			r.Key = newUUID()
			return r
		}
		s.MaxShrinkRuns = budget
		out := expectFailure(t, func(tb testing.TB) { oncekvtest.Check(tb, s) })
		require.Contains(t, out, "[rapid] failed after", "budget %d", budget)
		require.NotContains(t, out, "flaky", "budget %d", budget)
	}
}
