package oncekvtest

import (
	"fmt"

	"pgregory.net/rapid"
)

// cause is one explanation of a counterexample: a summary (no keys,
// values or times) and details.
type cause struct {
	summary, detail string
}

// The causes' summaries start with these, for tests and readers to tell
// them apart.
const (
	causeKey            = "the idempotency key changes between deliveries"
	causeNondeterminism = "the state is not a function of the messages"
	causeClock          = "the state depends on the store's clock"
	causeOrder          = "the state depends on the order of the messages"
	causeRollback       = "an effect that rolled back left a trace"
	causeAfterCommit    = "a crash right after a commit, before the ack, changed the state"
	causeDuplicates     = "a message delivered again changed the state"
	causeRealCrash      = "only a real crash shows it"
)

// diagnose finds why dup differs from ref: a request that changed
// between deliveries of a message explains it all; else it runs variants
// of the case: the same S once again (determinism), once with the
// duplicated run's clock (the clock), once in the duplicated run's order
// (order), and the duplicated run without each kind of fault. A variant's
// run failing is itself the cause shown.
func (c *checker[M]) diagnose(t *rapid.T, msgs []M, sched schedule, ref, dup outcome) []cause {
	if causes := keyCause(dup); causes != nil {
		return causes // it explains whatever a delivery again did
	}
	var causes []cause
	ctx := t.Context()
	differs := func(name string, o outcome, err error) (bool, string) {
		if err != nil {
			return true, err.Error()
		}
		ds := diff(ref.state, o.state)
		return len(ds) > 0, formatDiff(ds, "reference", name)
	}
	again, err := c.play(ctx, msgs, once(len(msgs)), c.refBase)
	if bad, d := differs("again", again, err); bad {
		return append(causes, cause{
			summary: causeNondeterminism + ": S applied once on two fresh stores, with the same clock, " +
				"gave two states (time.Now, randomness, map order?)",
			detail: "S applied once again:\n" + d,
		})
	}
	if c.dupBase != c.refBase {
		shifted, err := c.play(ctx, msgs, once(len(msgs)), c.dupBase)
		if bad, d := differs("later clock", shifted, err); bad {
			return append(causes, cause{
				summary: fmt.Sprintf("%s: S applied once with the clock %v later gives another state: "+
					"a reading of the clock (Tx.Now, time.Now) is stored; store the message's own time, "+
					"or leave it out of the Snapshot", causeClock, c.spec.ClockSkew),
				detail: "S applied once, the clock " + c.spec.ClockSkew.String() + " later:\n" + d,
			})
		}
	}
	if sched.reorders() {
		firsts := sched.firsts()
		ordered, err := c.play(ctx, msgs, firsts, c.refBase)
		if bad, d := differs("reordered", ordered, err); bad {
			causes = append(causes, cause{
				summary: causeOrder + ": S once each, in the order the duplicated run first delivered it, " +
					"gives another state: dedup does not fix reordering; fence the writes (PutFenced, " +
					"PutIfVersion), or set InOrder if the transport keeps the order",
				detail: "S once each as " + firsts.String() + ":\n" + d,
			})
		}
	}
	for _, f := range []struct {
		fault fault
		cause func(where string) cause
	}{{faultRollback, rollbackCause}, {faultAfterCommit, afterCommitCause}} {
		if !sched.has(f.fault) {
			continue
		}
		without, err := c.play(ctx, msgs, sched.without(f.fault), c.dupBase)
		if bad, _ := differs("without", without, err); !bad {
			causes = append(causes, f.cause("delivery "+sched.firstWith(f.fault)))
		}
	}
	if len(causes) == 0 {
		causes = append(causes, cause{summary: causeDuplicates + ", with the same request every time: " +
			"the handler changes what it stores when it sees a message again; keep its writes in the effect, " +
			"which the store runs once per key"})
	}
	return causes
}

// keyCause is the cause the run itself shows: a request that changed
// between deliveries of one message.
func keyCause(o outcome) []cause {
	ch := o.change
	if ch == nil {
		return nil
	}
	return []cause{{
		summary: fmt.Sprintf("%s of one message (m%d's %s changed): mint the key once, with the message; "+
			"a key made per attempt (a UUID in the retry loop) lets every delivery apply", causeKey, ch.msg, ch.field),
		detail: fmt.Sprintf("Request(m%d) gave handler %q key %q, then handler %q key %q",
			ch.msg, ch.first.Handler, ch.first.Key, ch.then.Handler, ch.then.Key),
	}}
}

// diagnoseCrash finds why a crash run differs from the reference: the
// same deliveries in process without the kills tell the kills' part from
// the rest, which diagnose explains; the kills simulated in process tell
// whether only a real crash shows it.
func (c *checker[M]) diagnoseCrash(t *rapid.T, f *failure[M]) []cause {
	ctx := t.Context()
	clean := f.sched.without(faultRollback, faultAfterCommit)
	noKills, err := c.play(ctx, f.msgs, clean, c.dupBase)
	if err != nil || len(diff(f.ref.state, noKills.state)) > 0 {
		return c.diagnose(t, f.msgs, clean, f.ref, noKills)
	}
	var causes []cause
	if sim, err := c.play(ctx, f.msgs, f.sched, c.dupBase); err == nil && len(diff(f.ref.state, sim.state)) == 0 {
		causes = append(causes, cause{summary: causeRealCrash + ": the handler loses or repeats work when its " +
			"process dies (memory, a buffer not flushed, what its Open does at a restart)"})
	}
	for _, n := range f.got.fired {
		if f.sched[n].Fault == faultRollback {
			causes = append(causes, rollbackCause(fmt.Sprintf("SIGKILL inside the effect of delivery #%d", n)))
		} else {
			causes = append(causes, afterCommitCause(fmt.Sprintf("SIGKILL right after the commit of delivery #%d", n)))
		}
	}
	return causes
}

// rollbackCause explains a trace left by an attempt that did not commit.
func rollbackCause(where string) cause {
	return cause{summary: causeRollback + ": the effect does something outside its transaction " +
		"(a file, another store, a second transaction, memory) that stays when the transaction does not commit (" +
		where + "); keep every write in tx, and external calls behind Claim"}
}

// afterCommitCause explains work lost or repeated by a crash after a
// commit.
func afterCommitCause(where string) cause {
	return cause{summary: causeAfterCommit + ": the handler does work after the commit " +
		"(an OnCommit hook, a write in another transaction, a buffer flushed later) that a crash skips or repeats (" +
		where + "); put it in the effect's transaction (Tx.Mark, queue.EnqueueTx for an outbox)"}
}
