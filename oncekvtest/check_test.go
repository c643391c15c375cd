package oncekvtest_test

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/oncekvtest"
)

// The correct handler passes: duplicates, reordering, rolled-back
// attempts and crashes after commits leave the balances as S once.
func TestCheckPassesAnEffectInItsTransaction(t *testing.T) {
	oncekvtest.Check(t, depositSpec())
}

// A handler built on each store (Open) with an outbox-like second write
// in the same transaction (Tx.Mark of a second handler's key) passes too.
func TestCheckPassesAHandlerThatMarksASecondKey(t *testing.T) {
	s := depositSpec()
	s.Effect = nil
	s.Open = func(env *oncekvtest.Env) (oncekvtest.Effect[deposit], error) {
		return func(tx *oncekv.Tx, d deposit) ([]byte, error) {
			res, err := tx.Mark(oncekv.Request{Handler: "notify", Key: d.ID}, nil)
			if err != nil || res.Duplicate {
				return nil, err
			}
			return addToBalance(tx, d)
		}, nil
	}
	oncekvtest.Check(t, s)
}

// setBalance is an assignment: "account := value", the n-th of its
// producer, whose later writes must win.
type setBalance struct {
	Seq     uint64 `json:"seq"`
	Account string `json:"account"`
}

var sets = rapid.Custom(func(t *rapid.T) setBalance {
	return setBalance{Seq: rapid.Uint64Range(1, 1<<20).Draw(t, "seq"), Account: "acct"}
})

func setRequest(s setBalance) oncekv.Request {
	return oncekv.Request{Handler: "set", Key: fmt.Sprint(s.Seq), Payload: []byte(s.Account)}
}

// assign writes the value with its sequence number as the fence, so a
// message that arrives after a later one is refused (ErrFenced) whatever
// the order: the state is the latest message's.
func assignFenced(tx *oncekv.Tx, s setBalance) ([]byte, error) {
	b, err := tx.CreateBucketIfNotExists(balances)
	if err != nil {
		return nil, err
	}
	return nil, b.PutFenced([]byte(s.Account), binary.BigEndian.AppendUint64(nil, s.Seq), s.Seq)
}

// With fences, reordering is harmless: the check passes.
func TestCheckPassesFencedAssignmentsReordered(t *testing.T) {
	oncekvtest.Check(t, oncekvtest.Spec[setBalance]{Messages: sets, Request: setRequest, Effect: assignFenced,
		Reorder: 5})
}

// InOrder keeps the first deliveries in S's order, for a handler whose
// transport keeps the order: last-writer-wins passes then.
func TestCheckInOrderKeepsTheFirstDeliveries(t *testing.T) {
	oncekvtest.Check(t, oncekvtest.Spec[setBalance]{Messages: sets, Request: setRequest, Effect: assignUnfenced,
		InOrder: true})
}

// assignUnfenced is last-writer-wins: the last delivery decides.
func assignUnfenced(tx *oncekv.Tx, s setBalance) ([]byte, error) {
	b, err := tx.CreateBucketIfNotExists(balances)
	if err != nil {
		return nil, err
	}
	return nil, b.Put([]byte(s.Account), binary.BigEndian.AppendUint64(nil, s.Seq))
}

// A permanent failure is recorded once and every duplicate gets it back:
// the state is the same, whatever the deliveries.
func TestCheckPassesAPermanentFailure(t *testing.T) {
	s := depositSpec()
	s.Effect = func(tx *oncekv.Tx, d deposit) ([]byte, error) {
		if d.Amount%4 == 0 {
			return nil, oncekv.Permanent(fmt.Errorf("amount %d refused", d.Amount))
		}
		return addToBalance(tx, d)
	}
	oncekvtest.Check(t, s)
}

// A Spec that cannot run fails the test, naming every field wrong.
func TestCheckRefusesAnInvalidSpec(t *testing.T) {
	out := expectFailure(t, func(tb testing.TB) {
		oncekvtest.Check(tb, oncekvtest.Spec[deposit]{MaxCopies: 11, MaxMessages: -1})
	})
	for _, want := range []string{"oncekvtest: invalid spec", "Messages", "Request", "Effect", "MaxCopies = 11", "MaxMessages = -1"} {
		require.Contains(t, out, want)
	}
}
