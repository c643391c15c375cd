package otel

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncekv/oncekv"
)

// DB is an oncekv store whose Apply, ApplyBatch and Claim record spans.
// Every other method is the store's own, through the embedded *oncekv.DB,
// which is also what to hand to queue.Open, idemhttp.New and the rest.
// The effects keep the signatures oncekv gives them.
type DB struct {
	*oncekv.DB
	t *Telemetry
}

// DB returns db with spans. It holds nothing of its own: make as many as
// convenient.
func (t *Telemetry) DB(db *oncekv.DB) *DB { return &DB{DB: db, t: t} }

// Apply is oncekv's DB.Apply in a span "oncekv.apply" about req.Key (see
// Start for the trace it joins), with the handler, the outcome, whether it
// was a duplicate and the mark's age then, Classify's action, and how many
// times the effect ran (more than once when group commit ran it again).
// Its result and error are Apply's, untouched.
func (d *DB) Apply(ctx context.Context, req oncekv.Request, effect func(tx *oncekv.Tx) ([]byte, error)) (oncekv.Result, error) {
	op := d.t.operationOf(req.Key)
	ctx, span := d.t.start(ctx, "oncekv.apply", op, trace.WithAttributes(AttrHandler.String(req.Handler)))
	defer span.End()
	var runs atomic.Int64
	counted := effect
	if effect != nil {
		counted = func(tx *oncekv.Tx) ([]byte, error) {
			runs.Add(1)
			return effect(tx)
		}
	}
	res, err := d.DB.Apply(ctx, req, counted)
	span.SetAttributes(AttrEffectRuns.Int64(runs.Load()))
	d.t.SetResult(span, req.Key, res, err, d.now(res))
	return res, err
}

// ApplyBatch is oncekv's DB.ApplyBatch in one span "oncekv.apply_batch",
// with the batch's size, a link to each request's operation trace, and an
// event "oncekv.request" per request with its index, handler, key hash,
// outcome and duplicate flag. The SDK keeps 128 links and 128 events per
// span by default (sdktrace.SpanLimits); a larger batch loses the rest,
// which the SDK counts as dropped. Its results are ApplyBatch's.
func (d *DB) ApplyBatch(ctx context.Context, reqs []oncekv.Request, effect func(tx *oncekv.Tx, i int) ([]byte, error)) ([]oncekv.BatchResult, error) {
	ops := make([]operation, len(reqs))
	links := make([]trace.Link, 0, min(len(reqs), maxBatchLinks))
	for i, r := range reqs {
		ops[i] = d.t.operationOf(r.Key)
		if ops[i].valid() && len(links) < maxBatchLinks {
			links = append(links, trace.Link{
				SpanContext: ops[i].placeholder(d.t.sampled(ops[i].trace)),
				Attributes:  []attribute.KeyValue{linkOperation.String(linkOperationTo), AttrKeyHash.String(ops[i].hashString())},
			})
		}
	}
	ctx, span := d.t.tracer.Start(ctx, "oncekv.apply_batch", trace.WithLinks(links...),
		trace.WithAttributes(AttrBatchSize.Int(len(reqs))))
	defer span.End()
	var runs atomic.Int64
	counted := func(tx *oncekv.Tx, i int) ([]byte, error) {
		runs.Add(1)
		return effect(tx, i)
	}
	if effect == nil {
		counted = nil
	}
	results, err := d.DB.ApplyBatch(ctx, reqs, counted)
	span.SetAttributes(AttrEffectRuns.Int64(runs.Load()))
	for i, r := range results {
		if i >= len(reqs) {
			break
		}
		attrs := append([]attribute.KeyValue{AttrBatchIndex.Int(i), AttrHandler.String(reqs[i].Handler),
			AttrOutcome.String(string(OutcomeOf(r.Result, r.Err))), AttrDuplicate.Bool(r.Duplicate || replayedFailure(r.Err))},
			ops[i].attributes()...)
		span.AddEvent(eventRequest, trace.WithAttributes(attrs...))
	}
	if err != nil {
		d.t.fail(span, "", err)
		span.SetAttributes(AttrOutcome.String(string(OutcomeOf(oncekv.Result{}, err))))
	}
	return results, err
}

// maxBatchLinks is the SDK's default limit of links per span: more would
// be dropped anyway.
const maxBatchLinks = 128

// now is the store's clock for a duplicate's mark age, and the zero time
// (no age) for any other result, sparing a clock reading.
func (d *DB) now(res oncekv.Result) time.Time {
	if !res.Duplicate {
		return time.Time{}
	}
	return d.DB.Now()
}
