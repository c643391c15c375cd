package queue

import (
	"fmt"

	"github.com/oncekv/oncekv"
)

// Check reads the whole queue in one read transaction and calls report
// with each problem it finds, an error matching oncekv.ErrCorrupt (or
// oncekv.ErrFormatVersion) that names the bucket and message: a record
// that does not decode, an index entry without its message or a message
// missing from the index, an ordering entry without its message, and a
// count Stats reads (messages, bytes, dead letters, index entries, delays,
// leases) that differs from what the scan found. An error from report
// stops the check and is returned. It costs a scan of the queue: it is
// for operators (oncekv check), and for tests.
func (v *View) Check(report func(problem error) error) error {
	return v.wrap("check", nil, v.db.View(func(otx *oncekv.Tx) error {
		c := checker{v: v, otx: otx, now: otx.Now().UnixNano(), report: report}
		return c.run()
	}))
}

// checker is one run of Check.
type checker struct {
	v      *View
	otx    *oncekv.Tx
	now    int64
	report func(error) error
}

func (c *checker) problem(format string, args ...any) error {
	return c.report(fmt.Errorf("%w: queue %q: "+format, append([]any{oncekv.ErrCorrupt, c.v.name}, args...)...))
}

func (c *checker) run() error {
	b := &c.v.b
	msgs, index, order, dead, state := c.otx.Bucket(b.msgs), c.otx.Bucket(b.index), c.otx.Bucket(b.order),
		c.otx.Bucket(b.dead), c.otx.Bucket(b.state)
	if msgs == nil || index == nil || order == nil || dead == nil || state == nil {
		return c.problem("buckets missing")
	}
	counted := map[string]uint64{}
	if err := state.ForEach(func(k, val []byte) error {
		if len(val) != 8 {
			return c.problem("bucket %q counter %q is %d bytes, not 8", state.Name(), k, len(val))
		}
		counted[string(k)] = readCounter(state, string(k))
		return nil
	}); err != nil {
		return err
	}
	var found struct{ live, dead, bytes, index, sched, leased, maxID uint64 }
	records := map[uint64]*record{}
	scan := func(bk *oncekv.Bucket, isDead bool) error {
		return bk.ForEach(func(k, val []byte) error {
			id, err := parseID(k)
			if err != nil {
				return c.problem("bucket %q key %x: %v", bk.Name(), k, err)
			}
			found.maxID = max(found.maxID, id)
			r, err := decodeRecord(bk, id, val)
			if err != nil {
				return c.report(err)
			}
			found.bytes += uint64(r.size())
			if isDead {
				found.dead++
				return nil
			}
			found.live++
			records[id] = r
			if r.VisibleAt != 0 {
				flag := index.Get(indexKey(r.VisibleAt, id))
				if flag == nil {
					return c.problem("message %d is not in the index at %d", id, r.VisibleAt)
				}
				if leased := len(flag) == 1 && flag[0] == 1; leased != (r.LeaseUntil != 0) {
					return c.problem("message %d: index entry leased %v, record leased until %d", id, leased, r.LeaseUntil)
				}
			} else if r.Order == "" {
				return c.problem("message %d is in neither the index nor an ordering key's line", id)
			}
			return c.checkOrder(order, bk, id, r)
		})
	}
	if err := scan(msgs, false); err != nil {
		return err
	}
	if err := scan(dead, true); err != nil {
		return err
	}
	sides := c.sides()
	if err := index.ForEach(func(k, _ []byte) error {
		at, id, err := parseIndexKey(k)
		if err != nil {
			return c.problem("bucket %q: %v", index.Name(), err)
		}
		found.index++
		if r := records[id]; r == nil || r.VisibleAt != at {
			return c.problem("index entry of message %d at %d has no such message", id, at)
		}
		inSide := false
		for _, s := range sides {
			if s.b != nil && s.b.Get(k) != nil {
				inSide = true
				*s.count(&found.sched, &found.leased)++
			}
		}
		if !inSide && at > c.now && counted["layout"] >= layoutVersion {
			return c.problem("message %d, visible at %d, is in neither the delays nor the leases", id, at)
		}
		return nil
	}); err != nil {
		return err
	}
	for _, s := range sides {
		if s.b == nil {
			continue
		}
		if err := s.b.ForEach(func(k, _ []byte) error {
			if index.Get(k) == nil {
				_, id, _ := parseIndexKey(k)
				return c.problem("bucket %q holds message %d, which is not in the index", s.b.Name(), id)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	if err := order.ForEach(func(k, _ []byte) error {
		key, id, err := parseOrderKey(k)
		if err != nil {
			return c.problem("bucket %q: %v", order.Name(), err)
		}
		if r := records[id]; (r == nil || r.Order != key) && dead.Get(idKey(id)) == nil {
			return c.problem("ordering key %q holds message %d, which is neither live nor dead", clip(key), id)
		}
		return nil
	}); err != nil {
		return err
	}
	want := []struct {
		name string
		n    uint64
	}{{"count", found.live + found.dead}, {"dead", found.dead}, {"bytes", found.bytes}}
	if counted["layout"] >= layoutVersion {
		want = append(want, struct {
			name string
			n    uint64
		}{"index", found.index}, struct {
			name string
			n    uint64
		}{"sched", found.sched}, struct {
			name string
			n    uint64
		}{"leased", found.leased})
	}
	for _, w := range want {
		if counted[w.name] != w.n {
			if err := c.problem("counter %q is %d, the scan found %d", w.name, counted[w.name], w.n); err != nil {
				return err
			}
		}
	}
	if counted["seq"] < found.maxID {
		return c.problem("counter \"seq\" is %d, below message %d", counted["seq"], found.maxID)
	}
	return nil
}

// side is .w or .l as Check reads them.
type side struct {
	b      *oncekv.Bucket
	leased bool
}

func (s side) count(sched, leased *uint64) *uint64 {
	if s.leased {
		return leased
	}
	return sched
}

func (c *checker) sides() []side {
	return []side{{b: c.otx.Bucket(c.v.b.sched)}, {b: c.otx.Bucket(c.v.b.lease), leased: true}}
}

// checkOrder checks that a live message with an ordering key has its
// entry in the order bucket.
func (c *checker) checkOrder(order, bk *oncekv.Bucket, id uint64, r *record) error {
	if r.Order == "" {
		return nil
	}
	if order.Get(orderKey(r.Order, id)) == nil {
		return c.problem("bucket %q message %d: no entry for its ordering key %q", bk.Name(), id, clip(r.Order))
	}
	return nil
}
