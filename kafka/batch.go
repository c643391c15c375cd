package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/delivery"
)

// Verdict says what became of one record of a poll; its String method
// returns the verdict's name ("applied", "duplicate", "gave up", "retry").
type Verdict = delivery.Verdict

// The verdicts. Applied, Duplicate and GaveUp records have their offsets
// committed (the commit may fail, which costs only duplicates); Retry
// records are polled again.
const (
	// Applied: the effect ran and committed with the record's mark.
	Applied = delivery.Applied
	// Duplicate: the key was applied before; the effect did not run.
	Duplicate = delivery.Duplicate
	// GaveUp: the record can never succeed (see Options.DeadLetter).
	GaveUp = delivery.GaveUp
	// Retry: the record failed in a way a retry can fix, or an earlier
	// record of its partition did (then it was not applied: its Err is
	// ErrEarlierFailed); its partition is rewound to the first such
	// record, so a partition's records are applied in offset order.
	Retry = delivery.Retry
)

// Outcome is what became of one record of a poll.
type Outcome struct {
	Record  *kgo.Record
	Key     string // what Options.Key returned
	Verdict Verdict
	// Result is the store's answer for Applied and Duplicate: the
	// response, and when the key was first seen.
	Result oncekv.Result
	// Err is the record's *RecordError for GaveUp and Retry; nil
	// otherwise.
	Err error
}

// batch is one poll on its way through the store and the offset commit.
type batch struct {
	c        *Consumer
	outcomes []Outcome
	// offsets are those to commit: per partition, just past the last
	// record settled (applied, duplicate or given up) before the first
	// Retry record.
	offsets map[string]map[int32]kgo.EpochOffset
	// retries holds, per partition, the record to rewind to.
	retries map[partition]*kgo.Record
	delay   time.Duration // to wait before the next poll
}

func newBatch(c *Consumer, recs []*kgo.Record) *batch {
	b := &batch{
		c:        c,
		outcomes: make([]Outcome, len(recs)),
		offsets:  make(map[string]map[int32]kgo.EpochOffset),
		retries:  make(map[partition]*kgo.Record),
	}
	for i, r := range recs {
		b.outcomes[i] = Outcome{Record: r, Key: c.opts.Key(r)}
	}
	return b
}

// apply applies the batch with one ApplyBatch and judges each record. Its
// error is ApplyBatch's: the batch as a whole failed, nothing is judged.
func (b *batch) apply(ctx context.Context) error {
	c := b.c
	keys := make([]string, len(b.outcomes))
	for i := range b.outcomes {
		o := &b.outcomes[i]
		if o.Key == "" {
			o.Err = recordError(o, ErrNoKey)
		}
		keys[i] = o.Key
	}
	// broken holds, per partition, the first record whose effect failed
	// in a way a retry can fix: the records after it in its partition are
	// not applied in this batch (ErrEarlierFailed), so a partition is
	// applied in order. Skipping them costs a rollback each, no commit.
	broken := make(map[partition]int)
	results, err := delivery.Apply(ctx, c.db, c.opts.Handler, keys,
		func(j int) []byte { return b.outcomes[j].Record.Value },
		func(tx *oncekv.Tx, j int) ([]byte, error) {
			r := b.outcomes[j].Record
			p := partition{r.Topic, r.Partition}
			if k, ok := broken[p]; ok && k < j {
				return nil, ErrEarlierFailed
			}
			resp, err := c.effect(tx, r)
			if k, ok := broken[p]; err != nil && !oncekv.IsPermanent(err) && (!ok || j < k) {
				broken[p] = j
			}
			return resp, err
		})
	if err != nil {
		return err
	}
	for i, res := range results {
		o := &b.outcomes[i]
		o.Result = res.Result
		if res.Err != nil {
			o.Err = recordError(o, res.Err)
		}
	}
	b.judge(ctx)
	return nil
}

func recordError(o *Outcome, err error) error {
	r := o.Record
	return &RecordError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: o.Key, Err: err}
}

// judge gives each record its verdict, in poll order (offset order within
// a partition), and collects the offsets to commit and the partitions to
// rewind.
func (b *batch) judge(ctx context.Context) {
	c := b.c
	now := c.db.Now()
	for i := range b.outcomes {
		o := &b.outcomes[i]
		r := o.Record
		p := partition{r.Topic, r.Partition}
		if b.retries[p] != nil {
			o.Verdict = Retry // an earlier record of the partition comes again first
			continue
		}
		switch {
		case o.Err == nil && o.Result.Duplicate:
			o.Verdict = Duplicate
			c.stats.duplicates.Add(1)
			delivery.LogDuplicate(ctx, c.opts.Logger, c.opts.Handler, o.Key, now.Sub(o.Result.FirstSeen),
				slog.String("topic", r.Topic), slog.Int("partition", int(r.Partition)), slog.Int64("offset", r.Offset))
		case o.Err == nil:
			o.Verdict = Applied
			c.stats.applied.Add(1)
		case errors.Is(o.Err, ErrEarlierFailed):
			// The record before it was given up on after all: start again
			// here, at once.
			o.Verdict = Retry
			b.retries[p] = r
			continue
		default:
			if delay, again := b.again(ctx, p, o, now); again {
				o.Verdict = Retry
				b.retries[p] = r
				b.delay = max(b.delay, delay)
				c.stats.retries.Add(1)
				continue
			}
			o.Verdict = GaveUp
			c.stats.gaveUp.Add(1)
		}
		if b.offsets[r.Topic] == nil {
			b.offsets[r.Topic] = make(map[int32]kgo.EpochOffset)
		}
		b.offsets[r.Topic][r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
		if f, ok := c.failed[p]; ok && f.offset <= r.Offset {
			delete(c.failed, p)
		}
	}
}

// again decides about a record that failed: retried (true, after the
// returned delay) or given up on (false, after DeadLetter took it).
func (b *batch) again(ctx context.Context, p partition, o *Outcome, now time.Time) (time.Duration, bool) {
	c := b.c
	// No delivery of a record without a key will ever have one. A key a
	// claim holds is polled for again at least every Policy().Cap.
	if !errors.Is(o.Err, ErrNoKey) {
		attempt := func() int { return c.fail(p, o.Record.Offset) }
		if delay, again := delivery.Again(ctx, o.Err, now, c.retry, attempt, c.retry.Policy().Cap); again {
			return delay, true
		}
	}
	if c.opts.DeadLetter == nil {
		c.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "oncekv: kafka: record given up on; its offset is committed",
			slog.String("handler", c.opts.Handler), slog.String("key", o.Key),
			slog.String("topic", o.Record.Topic), slog.Int("partition", int(o.Record.Partition)),
			slog.Int64("offset", o.Record.Offset), slog.Any("err", o.Err))
		return 0, false
	}
	if err := c.opts.DeadLetter(ctx, o.Record, o.Err); err != nil {
		if re, ok := o.Err.(*RecordError); ok {
			re.Err = fmt.Errorf("dead letter: %w; record: %w", err, re.Err)
		}
		return c.retry.Backoff(c.fail(p, o.Record.Offset)), true
	}
	return 0, false
}

// firsts returns the first record of each partition of the batch.
func (b *batch) firsts() map[partition]*kgo.Record {
	out := make(map[partition]*kgo.Record)
	for _, o := range b.outcomes {
		p := partition{o.Record.Topic, o.Record.Partition}
		if out[p] == nil {
			out[p] = o.Record
		}
	}
	return out
}
