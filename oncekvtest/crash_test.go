package oncekvtest_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/oncekvtest"
)

// The correct handler survives real SIGKILLs inside its effects and
// right after its commits.
func TestCheckCrashPassesAnEffectInItsTransaction(t *testing.T) {
	oncekvtest.CheckCrash(t, depositSpec())
}

// An audit line appended to a file inside the effect stays when the
// process dies before the commit, and the redelivery appends another.
func TestCheckCrashCatchesAnAuditLogAppendedOutsideTheTransaction(t *testing.T) {
	out := expectFailure(t, func(tb testing.TB) { oncekvtest.CheckCrash(tb, plantedCrash(auditFileSpec())) })
	requireCounterexample(t, out, "an effect that rolled back left a trace",
		"SIGKILL inside the effect of delivery #0", "reference 1, crashed 2", "counterexample: 1 message, 1 delivery")
}

// journalSpec is a handler with a start-up recovery that is not
// idempotent: the effect notes each deposit in a journal file before its
// commit and clears the journal once committed; Open "recovers" by adding
// every deposit left in the journal, in a transaction of its own, without
// the store's dedup. In one process the journal is cleared or left for
// nobody; only a restart after a crash replays it.
func journalSpec() oncekvtest.Spec[deposit] {
	s := depositSpec()
	s.Effect = nil
	s.Open = func(env *oncekvtest.Env) (oncekvtest.Effect[deposit], error) {
		path := filepath.Join(env.Dir, "journal")
		if err := replayJournal(env.DB, path); err != nil { // the bug
			return nil, err
		}
		return func(tx *oncekv.Tx, d deposit) ([]byte, error) {
			if err := appendJSONLine(path, d); err != nil {
				return nil, err
			}
			tx.OnCommit(func() { _ = os.Remove(path) })
			return addToBalance(tx, d)
		}, nil
	}
	return s
}

func appendJSONLine(path string, d deposit) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s %s %d\n", d.ID, d.Account, d.Amount)
	return errors.Join(err, f.Close())
}

func replayJournal(db *oncekv.DB, path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var d deposit
		if _, err := fmt.Sscanf(sc.Text(), "%s %s %d", &d.ID, &d.Account, &d.Amount); err != nil {
			return err
		}
		if err := db.Update(func(tx *oncekv.Tx) error { _, err := addToBalance(tx, d); return err }); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return os.Remove(path)
}

// In one process the journal handler is right: Check's simulated faults
// never restart it.
func TestCheckCannotSeeARecoveryThatOnlyARestartRuns(t *testing.T) {
	oncekvtest.Check(t, journalSpec())
}

// A real crash and restart replays the journal, and the redelivery adds
// the deposit again.
func TestCheckCrashCatchesARecoveryThatIsNotIdempotent(t *testing.T) {
	out := expectFailure(t, func(tb testing.TB) { oncekvtest.CheckCrash(tb, plantedCrash(journalSpec())) })
	requireCounterexample(t, out, "only a real crash shows it", "~ balances/acct-", "SIGKILL", "crashed 0x",
		"counterexample: 1 message, 1 delivery")
}

// lossy loses a field on its way through JSON.
type lossy struct {
	ID     string
	amount uint64
}

// CheckCrash says so, instead of comparing states of other messages.
func TestCheckCrashRefusesMessagesThatDoNotSurviveJSON(t *testing.T) {
	gen := rapid.Custom(func(t *rapid.T) lossy {
		return lossy{ID: "a", amount: rapid.Uint64Range(1, 9).Draw(t, "amount")}
	})
	out := expectFailure(t, func(tb testing.TB) {
		oncekvtest.CheckCrash(tb, plantedCrash(oncekvtest.Spec[lossy]{Messages: gen,
			Request: func(l lossy) oncekv.Request { return oncekv.Request{Handler: "h", Key: l.ID} },
			Effect: func(tx *oncekv.Tx, l lossy) ([]byte, error) {
				return binary.BigEndian.AppendUint64(nil, l.amount), nil
			}}))
	})
	require.Contains(t, out, "CheckCrash sends the messages to its child as JSON, and m0 does not survive it")
}
