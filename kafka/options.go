package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oncekv/oncekv/retry"
)

// Options configures a Consumer. Handler and Key are required; a zero
// field of the others takes its default.
type Options struct {
	// Handler names the consumer in the store: records are deduplicated
	// per (Handler, key), so two consumers of one topic that do different
	// things need two handlers. Required.
	Handler string
	// Key returns a record's idempotency key: HeaderKey(DefaultKeyHeader)
	// when the producer sets it, RecordKey when the record key is the
	// operation's id, CoordinatesKey only when records carry no id at all
	// (read its caveat). Required.
	Key KeyFunc
	// MaxRecords bounds one poll, and so one ApplyBatch and one commit.
	// Default 500.
	MaxRecords int
	// Retry decides what happens after a record fails in a way a retry
	// can fix (the effect's own error, oncekv.ErrInProgress): the record's
	// partition is rewound to it and polled again after the policy's
	// backoff (or when the claim holding the key ends), until the policy's
	// MaxAttempts, when the record is given up on. nil: retry's defaults
	// (10 attempts, 1s base, 5 minute cap).
	Retry *retry.Policy
	// DeadLetter, if set, is called with each record given up on (no key,
	// key too large, key reused with another payload, an effect's error
	// marked permanent, attempts exhausted) before its offset is
	// committed: produce it to a dead-letter topic there, with its key. If
	// DeadLetter returns an error, the record is retried as a transient
	// failure instead. nil: the record is logged at warn level and its
	// offset committed, so one poison record never blocks its partition.
	DeadLetter func(ctx context.Context, r *kgo.Record, err error) error
	// OnBatch, if set, is called with every record's outcome once the
	// poll's batch has committed in the store and before its offsets are
	// committed, on Run's goroutine: a crash between the two leaves the
	// records to be delivered again, so every committed offset was seen
	// by OnBatch first. It must not keep the slice.
	OnBatch func(outcomes []Outcome)
	// CommitTimeout bounds one offset commit, which runs even after Run's
	// context ended (the batch's effects are committed; committing their
	// offsets spares the next owner the duplicates). Default 10s.
	CommitTimeout time.Duration
	// Logger receives "duplicate suppressed" at info level with handler,
	// key, age_ms, topic, partition and offset, and failed commits and
	// given-up records at warn. Default slog.Default().
	Logger *slog.Logger
}

// withDefaults returns o with its defaults filled in, or ErrInvalidOptions
// listing every bad field.
func (o Options) withDefaults() (Options, *retry.Retrier, error) {
	var errs []error
	if o.Handler == "" {
		errs = append(errs, errors.New("option Handler is required"))
	}
	if o.Key == nil {
		errs = append(errs, errors.New("option Key is required (HeaderKey, RecordKey or CoordinatesKey)"))
	}
	if o.MaxRecords < 0 {
		errs = append(errs, fmt.Errorf("option MaxRecords %d is negative", o.MaxRecords))
	}
	if o.CommitTimeout < 0 {
		errs = append(errs, fmt.Errorf("option CommitTimeout %v is negative", o.CommitTimeout))
	}
	r, err := retry.New(o.Retry)
	if err != nil {
		errs = append(errs, fmt.Errorf("option Retry: %w", err))
	}
	if len(errs) > 0 {
		return o, nil, fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	if o.MaxRecords == 0 {
		o.MaxRecords = 500
	}
	if o.CommitTimeout == 0 {
		o.CommitTimeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, r, nil
}

// ConsumerOpts returns the kgo options a Consumer needs, to pass to
// kgo.NewClient with the seed brokers and anything else: the group and
// topics, offsets committed by the Consumer only (kgo.DisableAutoCommit),
// and no rebalance while a poll is being applied (kgo.BlockRebalanceOnPoll),
// so that a commit never covers a partition this member lost. Set
// kgo.RebalanceTimeout above the longest batch you expect: a member
// stalled longer is kicked out of the group, its commit fails, and the
// next owner gets the batch again (duplicates, suppressed).
func ConsumerOpts(group string, topics ...string) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
	}
}

// checkConsumerClient returns ErrClientConfig naming every option of cl
// that breaks the consumer's guarantee.
func checkConsumerClient(cl *kgo.Client) error {
	var errs []error
	if g, _ := cl.OptValue(kgo.ConsumerGroup).(string); g == "" {
		errs = append(errs, errors.New("kgo.ConsumerGroup is required: offsets are committed to a group"))
	}
	if off, _ := cl.OptValue(kgo.DisableAutoCommit).(bool); !off {
		errs = append(errs, errors.New("kgo.DisableAutoCommit() is required: auto-commit commits offsets before the batch's effects are committed, and a crash then loses the batch"))
	}
	if block, _ := cl.OptValue(kgo.BlockRebalanceOnPoll).(bool); !block {
		errs = append(errs, errors.New("kgo.BlockRebalanceOnPoll() is required: without it a rebalance can move a partition while its batch is applied, and the commit then rewinds the new owner's offsets"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrClientConfig, errors.Join(errs...))
	}
	return nil
}
