package otel

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncekv/oncekv"
)

// Claim is an oncekv claim whose Complete, Fail and Extend record spans.
// Key, Token, Done, Result and LeaseUntil are the claim's own, through the
// embedded *oncekv.Claim.
type Claim struct {
	*oncekv.Claim
	d       *DB
	handler string
	key     string
	op      operation
}

// Claim is oncekv's DB.Claim in a span "oncekv.claim" about req.Key, with
// the handler, the lease asked for, and the outcome: claimed (with the
// token and the lease's end), duplicate (the key was done), or the error's.
// The claim it returns records its own calls; its error is Claim's.
func (d *DB) Claim(ctx context.Context, req oncekv.Request, lease time.Duration) (*Claim, error) {
	op := d.t.operationOf(req.Key)
	ctx, span := d.t.start(ctx, "oncekv.claim", op, trace.WithAttributes(AttrHandler.String(req.Handler),
		attrLease.Float64(lease.Seconds())))
	defer span.End()
	c, err := d.DB.Claim(ctx, req, lease)
	if err != nil || c == nil {
		d.t.SetResult(span, req.Key, oncekv.Result{}, err, time.Time{})
		return nil, err
	}
	w := &Claim{Claim: c, d: d, handler: req.Handler, key: req.Key, op: op}
	if c.Done() {
		d.t.SetResult(span, req.Key, c.Result(), nil, d.now(c.Result()))
		return w, nil
	}
	span.SetAttributes(append(leaseAttr(c.LeaseUntil()), tokenAttr(c.Token()))...)
	d.t.setOutcome(span, req.Key, OutcomeClaimed, oncekv.Result{}, nil, time.Time{})
	return w, nil
}

// startOp starts the span of one of c's calls, with its handler and token.
func (c *Claim) startOp(ctx context.Context, name string) (context.Context, trace.Span) {
	return c.d.t.start(ctx, name, c.op, trace.WithAttributes(AttrHandler.String(c.handler), tokenAttr(c.Token())))
}

// Complete is oncekv's Claim.Complete in a span "oncekv.claim.complete":
// applied, failed (a permanent error of effect), fenced (taken over), or
// the error's outcome, with the effect's runs.
func (c *Claim) Complete(ctx context.Context, response []byte, effect func(tx *oncekv.Tx) error) (oncekv.Result, error) {
	ctx, span := c.startOp(ctx, "oncekv.claim.complete")
	defer span.End()
	var runs atomic.Int64
	counted := effect
	if effect != nil {
		counted = func(tx *oncekv.Tx) error {
			runs.Add(1)
			return effect(tx)
		}
	}
	res, err := c.Claim.Complete(ctx, response, counted)
	span.SetAttributes(AttrEffectRuns.Int64(runs.Load()))
	c.d.t.SetResult(span, c.key, res, err, time.Time{})
	return res, err
}

// Fail is oncekv's Claim.Fail in a span "oncekv.claim.fail": failed (a
// permanent cause recorded), released (a transient one: the key is free
// at once), or the error's outcome. The cause's message is recorded in
// the span's "oncekv.claim.fail" event, its key redacted.
func (c *Claim) Fail(ctx context.Context, cause error) error {
	ctx, span := c.startOp(ctx, "oncekv.claim.fail")
	defer span.End()
	permanent := oncekv.IsPermanent(cause)
	msg := ""
	if cause != nil {
		msg = c.d.t.redact(cause.Error(), c.key)
		span.AddEvent("oncekv.claim.fail", trace.WithAttributes(attrCause.String(msg), attrPermanent.Bool(permanent)))
	}
	err := c.Claim.Fail(ctx, cause)
	switch {
	case err != nil:
		c.d.t.SetResult(span, c.key, oncekv.Result{}, err, time.Time{})
	case permanent:
		c.d.t.setOutcome(span, c.key, OutcomeFailed, oncekv.Result{}, nil, time.Time{})
		span.SetStatus(codes.Error, msg) // the operation failed for good, as Apply's span says
	default:
		c.d.t.setOutcome(span, c.key, OutcomeReleased, oncekv.Result{}, nil, time.Time{})
	}
	return err
}

// Extend is oncekv's Claim.Extend in a span "oncekv.claim.extend":
// extended (with the lease's new end), fenced, or the error's outcome.
func (c *Claim) Extend(ctx context.Context, lease time.Duration) error {
	ctx, span := c.startOp(ctx, "oncekv.claim.extend")
	defer span.End()
	err := c.Claim.Extend(ctx, lease)
	if err != nil {
		c.d.t.SetResult(span, c.key, oncekv.Result{}, err, time.Time{})
		return err
	}
	span.SetAttributes(leaseAttr(c.LeaseUntil())...)
	c.d.t.setOutcome(span, c.key, OutcomeExtended, oncekv.Result{}, nil, time.Time{})
	return nil
}
