package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/delivery"
	"github.com/oncekv/oncekv/retry"
)

// Effect applies one record inside the store's write transaction: its
// writes commit together with the record's dedup mark, or not at all. It
// returns the response to store with the mark (nil is fine). Like every
// effect of ApplyBatch it may run more than once before one run commits
// (when another record of the batch fails), so it must change nothing
// outside tx: a call to another system is a Claim's job, not an effect's.
type Effect func(tx *oncekv.Tx, r *kgo.Record) ([]byte, error)

// Consumer applies a consumer group's records to a store: each poll with
// one ApplyBatch, then the poll's offsets committed. Make one with
// NewConsumer and call Run; Stats may be called at any time.
type Consumer struct {
	db     *oncekv.DB
	cl     *kgo.Client
	effect Effect
	opts   Options
	retry  *retry.Retrier
	stats  counters

	run delivery.Running // one Run at a time
	// failed is, per partition whose record failed transiently, that
	// record's offset and how many times it failed in a row; one entry per
	// partition at most, removed once the partition moves past it. Only
	// Run's goroutine touches it.
	failed map[partition]failure
}

type partition struct {
	topic string
	part  int32
}

type failure struct {
	offset   int64
	attempts int
}

// NewConsumer returns a Consumer applying cl's records to db with effect,
// configured by opts. cl must be a group consumer with the options
// ConsumerOpts returns (auto-commit off, rebalances blocked while a poll is
// applied); NewConsumer checks them. It starts nothing: call Run. The
// caller keeps cl (and closes it after Run returned).
//
// Errors: ErrNilArgument; ErrInvalidOptions listing every bad field;
// ErrClientConfig naming every option of cl that breaks the guarantee.
func NewConsumer(db *oncekv.DB, cl *kgo.Client, effect Effect, opts Options) (*Consumer, error) {
	if db == nil || cl == nil || effect == nil {
		return nil, fmt.Errorf("%w: db, client and effect are required", ErrNilArgument)
	}
	o, r, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkConsumerClient(cl); err != nil {
		return nil, err
	}
	return &Consumer{db: db, cl: cl, effect: effect, opts: o, retry: r, failed: make(map[partition]failure)}, nil
}

// Run polls, applies and commits until ctx is done, then returns nil. A
// batch in progress when ctx ends is finished if its commit in the store
// already began; its offsets are then committed within
// Options.CommitTimeout. A batch whose store commit did not begin is left
// uncommitted, to be delivered again. Run returns early with an error
// when the store cannot serve any batch (closed, read-only, poisoned by an
// I/O error: oncekv.Classify's Reopen) or the client was closed. Errors:
// ErrRunning.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.run.Begin(ErrRunning); err != nil {
		return err
	}
	defer c.run.End()
	for {
		recs, err := c.poll(ctx)
		if err != nil || ctx.Err() != nil {
			return err
		}
		if len(recs) == 0 {
			continue
		}
		delay, err := c.handle(ctx, recs)
		if err != nil {
			return err
		}
		if delay > 0 && !delivery.Sleep(ctx, delay) {
			return nil
		}
	}
}

// poll returns the next records, logging fetch errors (the client retries
// them itself) and returning an error only for a closed client.
func (c *Consumer) poll(ctx context.Context) ([]*kgo.Record, error) {
	fetches := c.cl.PollRecords(ctx, c.opts.MaxRecords)
	if fetches.IsClientClosed() {
		c.cl.AllowRebalance()
		return nil, fmt.Errorf("oncekv: kafka: %w", kgo.ErrClientClosed)
	}
	fetches.EachError(func(topic string, part int32, err error) {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			c.opts.Logger.Warn("oncekv: kafka: fetch failed", "topic", topic, "partition", part, "err", err)
		}
	})
	recs := fetches.Records()
	if len(recs) == 0 {
		c.cl.AllowRebalance()
		return nil, nil
	}
	c.stats.polls.Add(1)
	c.stats.records.Add(uint64(len(recs)))
	return recs, nil
}

// handle applies one poll, commits its offsets and rewinds what must be
// polled again; it returns how long to wait before the next poll. It
// allows the rebalance that the poll blocked on every path.
func (c *Consumer) handle(ctx context.Context, recs []*kgo.Record) (time.Duration, error) {
	defer c.cl.AllowRebalance()
	b := newBatch(c, recs)
	if err := b.apply(ctx); err != nil {
		if ctx.Err() != nil {
			return 0, nil // nothing committed: delivered again, to us or the next owner
		}
		if oncekv.Classify(err).Action == oncekv.Reopen {
			return 0, fmt.Errorf("oncekv: kafka: store: %w", err)
		}
		// The commit itself failed (the disk full, say): poll it all again,
		// after a backoff; the records are not to blame, so none is given up.
		firsts := b.firsts()
		c.rewind(firsts)
		return c.storeBackoff(firsts), nil
	}
	if c.opts.OnBatch != nil {
		c.opts.OnBatch(b.outcomes)
	}
	c.commit(ctx, b.offsets)
	c.rewind(b.retries)
	return b.delay, nil
}

// commit commits offsets, logging a failure: the batch's effects are in
// the store, so a failed commit costs only duplicates, suppressed when the
// records come again.
func (c *Consumer) commit(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset) {
	if len(offsets) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.CommitTimeout)
	defer cancel()
	err := commitSync(cctx, c.cl, offsets)
	if err == nil {
		c.stats.commits.Add(1)
		return
	}
	c.stats.commitFailures.Add(1)
	c.opts.Logger.Warn("oncekv: kafka: offset commit failed; the batch is committed in the store and its records, if delivered again, are suppressed as duplicates",
		"handler", c.opts.Handler, "offsets", fmt.Sprint(offsets), "err", err)
}

// commitSync commits offsets and returns the first error of the request
// or of any partition.
func commitSync(ctx context.Context, cl *kgo.Client, offsets map[string]map[int32]kgo.EpochOffset) error {
	var first error
	cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			first = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && first == nil {
					first = fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, err)
				}
			}
		}
	})
	return first
}

// rewind sets the given partitions back to the given records, so that the
// next poll returns them again.
func (c *Consumer) rewind(at map[partition]*kgo.Record) {
	if len(at) == 0 {
		return
	}
	set := make(map[string]map[int32]kgo.EpochOffset)
	for p, r := range at {
		if set[p.topic] == nil {
			set[p.topic] = make(map[int32]kgo.EpochOffset)
		}
		set[p.topic][p.part] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset}
	}
	c.stats.rewinds.Add(uint64(len(at)))
	c.cl.SetOffsets(set)
}

// storeBackoff counts one more failed attempt at each record of at and
// returns the retry policy's backoff for the most tried one.
func (c *Consumer) storeBackoff(at map[partition]*kgo.Record) time.Duration {
	attempts := 0
	for p, r := range at {
		attempts = max(attempts, c.fail(p, r.Offset))
	}
	return c.retry.Backoff(attempts)
}

// fail records one more failure of the record at offset of p and returns
// how many times in a row it failed.
func (c *Consumer) fail(p partition, offset int64) int {
	f := c.failed[p]
	if f.offset != offset {
		f = failure{offset: offset}
	}
	f.attempts++
	c.failed[p] = f
	return f.attempts
}
