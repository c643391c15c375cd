package oncekvtest

import (
	"fmt"
	"slices"
	"strings"

	"pgregory.net/rapid"
)

// fault is what happens to the first attempt of one delivery. In Check
// it is simulated in process; in CheckCrash the child SIGKILLs itself
// there.
type fault uint8

const (
	faultNone fault = iota
	// faultRollback: the effect ran, then the attempt ended before the
	// commit (rolled back; in CheckCrash, killed inside the effect); the
	// message is delivered again.
	faultRollback
	// faultAfterCommit: the commit was followed by a crash before the
	// ack: the OnCommit hooks after the checker's own do not run (in
	// CheckCrash, the process is killed there), and the message is
	// delivered again.
	faultAfterCommit
)

// delivery is one delivery of a message of S.
type delivery struct {
	Msg   int   `json:"msg"`   // its index in S
	Fault fault `json:"fault"` // of its first attempt
}

// schedule is the deliveries of one run, in order.
type schedule []delivery

// once is S delivered once each, in order, without faults.
func once(n int) schedule {
	s := make(schedule, n)
	for i := range s {
		s[i].Msg = i
	}
	return s
}

// copyPlan is one delivery of a message, as drawn: how many places
// after the message's own it comes, and its fault.
type copyPlan struct {
	Moved int
	Fault fault
}

// planned is a message of S with the plan of its deliveries. Drawn
// together, a message and its copies are one block of rapid's draws,
// which shrinking deletes whole.
type planned[M any] struct {
	Message M
	Copies  []copyPlan
}

// faultMix is how often the copies of a case get a fault.
type faultMix uint8

const (
	noFaults   faultMix = iota
	someFaults          // Check: about one copy in four
	manyFaults          // CheckCrash, where faults are kills: about one in two
)

// faultOf maps a draw from 0 to 9 to a fault: zero (where shrinking
// goes) and the low values are none.
func (mix faultMix) faultOf(v int) fault {
	switch {
	case mix == someFaults && (v == 7 || v == 8), mix == manyFaults && v >= 5 && v <= 7:
		return faultRollback
	case mix == someFaults && v == 9, mix == manyFaults && v >= 8:
		return faultAfterCommit
	}
	return faultNone
}

// plannedGen draws a message and its 1 to MaxCopies copies: each moved
// 0 to Reorder places (the first not at all with InOrder), each with a
// fault as often as mix says. Every draw shrinks towards one copy, in
// place, without a fault.
func plannedGen[M any](s *Spec[M], mix faultMix) *rapid.Generator[planned[M]] {
	return rapid.Custom(func(t *rapid.T) planned[M] {
		p := planned[M]{Message: s.Messages.Draw(t, "message")}
		n := rapid.IntRange(1, s.MaxCopies).Draw(t, "copies")
		for c := range n {
			var cp copyPlan
			if s.Reorder > 0 && (c > 0 || !s.InOrder) {
				cp.Moved = rapid.IntRange(0, s.Reorder).Draw(t, "moved by")
			}
			if mix != noFaults {
				cp.Fault = mix.faultOf(rapid.IntRange(0, 9).Draw(t, "fault"))
			}
			p.Copies = append(p.Copies, cp)
		}
		return p
	})
}

// testCase is S with the plan of its deliveries: what rapid draws, and
// what the reducer makes smaller. It prints as the case.
type testCase[M any] []planned[M]

// drawCase draws a case of 1 to MaxMessages messages.
func drawCase[M any](t *rapid.T, s *Spec[M], mix faultMix) testCase[M] {
	return rapid.Map(rapid.SliceOfN(plannedGen(s, mix), 1, s.MaxMessages),
		func(ps []planned[M]) testCase[M] { return ps }).Draw(t, "S")
}

// messages is S.
func (tc testCase[M]) messages() []M {
	msgs := make([]M, len(tc))
	for i, p := range tc {
		msgs[i] = p.Message
	}
	return msgs
}

// schedule lays the copies out: each at its message's place plus its
// move, ties in message order, then copy order.
func (tc testCase[M]) schedule() schedule {
	type slot struct{ at, msg, copy int }
	var slots []slot
	for i, p := range tc {
		for c, cp := range p.Copies {
			slots = append(slots, slot{i + cp.Moved, i, c})
		}
	}
	slices.SortFunc(slots, func(a, b slot) int {
		if a.at != b.at {
			return a.at - b.at
		}
		if a.msg != b.msg {
			return a.msg - b.msg
		}
		return a.copy - b.copy
	})
	sched := make(schedule, len(slots))
	for i, sl := range slots {
		sched[i] = delivery{Msg: sl.msg, Fault: tc[sl.msg].Copies[sl.copy].Fault}
	}
	return sched
}

// GoString is how rapid's log shows a case: each message of S with its
// copies, "moved by" and faults.
func (tc testCase[M]) GoString() string {
	var b strings.Builder
	for i, p := range tc {
		fmt.Fprintf(&b, "\n    m%d = %s, delivered %s:", i, clip(fmt.Sprintf("%+v", p.Message)),
			count(len(p.Copies), "time", "times"))
		for _, c := range p.Copies {
			fmt.Fprintf(&b, " [moved by %d%s]", c.Moved, c.Fault.suffix())
		}
	}
	return b.String()
}

// clone is a deep copy of tc's plan (the messages themselves are shared).
func (tc testCase[M]) clone() testCase[M] {
	c := slices.Clone(tc)
	for i := range c {
		c[i].Copies = slices.Clone(c[i].Copies)
	}
	return c
}

// smaller lists the cases one step smaller than tc, the biggest steps
// first: a message removed, a copy removed, a fault removed, a move
// shortened. The reducer tries them in this order.
func (tc testCase[M]) smaller() []testCase[M] {
	var out []testCase[M]
	for i := range tc {
		if len(tc) > 1 {
			out = append(out, slices.Delete(tc.clone(), i, i+1))
		}
	}
	for i, p := range tc {
		for j := range p.Copies {
			if len(p.Copies) > 1 {
				c := tc.clone()
				c[i].Copies = slices.Delete(c[i].Copies, j, j+1)
				out = append(out, c)
			}
		}
	}
	for i, p := range tc {
		for j, cp := range p.Copies {
			if cp.Fault != faultNone {
				c := tc.clone()
				c[i].Copies[j].Fault = faultNone
				out = append(out, c)
			}
			if cp.Moved > 0 {
				c := tc.clone()
				c[i].Copies[j].Moved--
				out = append(out, c)
			}
		}
	}
	return out
}

// without returns a copy of s with the faults of the kinds drop removed.
func (s schedule) without(drop ...fault) schedule {
	c := slices.Clone(s)
	for i := range c {
		if slices.Contains(drop, c[i].Fault) {
			c[i].Fault = faultNone
		}
	}
	return c
}

// has reports whether a delivery of s has fault f.
func (s schedule) has(f fault) bool {
	return slices.ContainsFunc(s, func(d delivery) bool { return d.Fault == f })
}

// firsts is S once each, in the order of s's first deliveries.
func (s schedule) firsts() schedule {
	seen := map[int]bool{} // at most len(S) entries
	var c schedule
	for _, d := range s {
		if !seen[d.Msg] {
			seen[d.Msg] = true
			c = append(c, delivery{Msg: d.Msg})
		}
	}
	return c
}

// reorders reports whether s's first deliveries are out of S's order.
func (s schedule) reorders() bool {
	f := s.firsts()
	return !slices.IsSortedFunc(f, func(a, b delivery) int { return a.Msg - b.Msg })
}

// firstWith names the first delivery with fault f: "#3 of m1".
func (s schedule) firstWith(f fault) string {
	for i, d := range s {
		if d.Fault == f {
			return fmt.Sprintf("#%d of m%d", i, d.Msg)
		}
	}
	return "none"
}

// String lists the deliveries: "m0 m1 m0(rolled back) m1(crash after commit)".
func (s schedule) String() string {
	var b strings.Builder
	for i, d := range s {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "m%d%s", d.Msg, d.Fault.suffix())
	}
	return b.String()
}

// suffix is how a delivery's fault is shown after it.
func (f fault) suffix() string {
	switch f {
	case faultRollback:
		return "(rolled back)"
	case faultAfterCommit:
		return "(crash after commit)"
	}
	return ""
}
