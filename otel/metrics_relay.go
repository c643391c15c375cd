package otel

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/oncekv/oncekv/relay"
)

// relaySnapshot is what one collection reads of a relay.
type relaySnapshot struct {
	relay.Stats
	// RetryRatio is the share of retries in the sends of the trailing
	// Options.RetryRatioWindow.
	RetryRatio float64
}

func relayCounter(name, desc string, value func(s *relaySnapshot) float64) spec[relaySnapshot] {
	return spec[relaySnapshot]{"oncekv.relay." + name, "{send}", desc, true, value}
}

// relaySpecs are a relay's counters and gauges, and the article's retry
// ratio.
var relaySpecs = []spec[relaySnapshot]{
	relayCounter("sent", "Sends that succeeded and were acked.", func(s *relaySnapshot) float64 { return float64(s.Sent) }),
	relayCounter("retried", "Sends of a delivery after its first, allowed by the retry budget.", func(s *relaySnapshot) float64 { return float64(s.Retried) }),
	relayCounter("failed", "Sends that returned an error and were nacked.", func(s *relaySnapshot) float64 { return float64(s.Failed) }),
	relayCounter("dead_lettered", "Failed sends whose nack dead-lettered the message.", func(s *relaySnapshot) float64 { return float64(s.DeadLettered) }),
	relayCounter("budget_exhausted", "Retries the retry budget refused: deferred unsent.", func(s *relaySnapshot) float64 { return float64(s.BudgetExhausted) }),
	relayCounter("released", "Messages received but not sent when Run stopped: deferred unsent.", func(s *relaySnapshot) float64 { return float64(s.Released) }),
	relayCounter("fenced", "Acks, nacks and defers refused because the lease was taken over.", func(s *relaySnapshot) float64 { return float64(s.Fenced) }),
	{"oncekv.relay.retry_ratio", "1", "Retries over all sends (retried / (sent + failed)) in the trailing Options.RetryRatioWindow: " +
		"above 0.1, the far side is failing and retries add load to it. 0 with no sends.", false,
		func(s *relaySnapshot) float64 { return s.RetryRatio }},
	{"oncekv.relay.backoff", "s", "The longest delay the latest retry may wait; 0 after a success.", false,
		func(s *relaySnapshot) float64 { return s.Backoff.Seconds() }},
	{"oncekv.relay.oldest_pending.age", "s", "How long ago the oldest message the workers hold was enqueued; 0 when they hold none.", false,
		func(s *relaySnapshot) float64 { return s.OldestPendingAge.Seconds() }},
	{"oncekv.relay.holding", "{message}", "Messages the workers hold now, received and not yet settled.", false,
		func(s *relaySnapshot) float64 { return float64(s.Holding) }},
}

// ObserveRelay reports r's Stats through the Telemetry's meter, with the
// attribute queue=queueName (the queue r delivers) and attrs, and
// oncekv.relay.retry_ratio: the article's retry ratio, Retried over
// Sent + Failed (sends whose ack or nack was refused as fenced count in
// neither) over the trailing Options.RetryRatioWindow, measured between
// the collections' snapshots: from the newest snapshot at least the window
// old to now (before the window has passed once, from the relay's New). A relay's counters start with New,
// so they reset with the process. Errors: ErrNilArgument; the meter's.
func (t *Telemetry) ObserveRelay(queueName string, r *relay.Relay, attrs ...attribute.KeyValue) (metric.Registration, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: nil relay", ErrNilArgument)
	}
	with := metric.WithAttributeSet(attribute.NewSet(append(slices.Clone(attrs), metricQueue.String(queueName))...))
	// The first base is zero counts now: until the window has passed, the
	// ratio is over everything since the relay's New.
	w := &ratioWindow{window: t.opts.RetryRatioWindow, snaps: []ratioSnap{{at: t.opts.Now()}}}
	return t.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := relaySnapshot{Stats: r.Stats()}
		s.RetryRatio = w.ratio(t.opts.Now(), s.Retried, s.Sent+s.Failed)
		observeAll(o, t.inst.relay, &s, with)
		return nil
	}, observables(t.inst.relay)...)
}

// ratioWindow keeps the snapshots of the retry ratio's trailing window.
type ratioWindow struct {
	window time.Duration
	mu     sync.Mutex
	// snaps are oldest first: at most one older than the window (the
	// base), and the rest at least window/ratioSlots apart but the newest,
	// so there are at most ratioSlots+3 however often collections come.
	snaps []ratioSnap
}

type ratioSnap struct {
	at             time.Time
	retries, sends uint64
}

// ratioSlots is how finely the window is sampled.
const ratioSlots = 16

// ratio records (retries, sends) at now and returns the retries' share of
// the sends since the window's base.
func (w *ratioWindow) ratio(now time.Time, retries, sends uint64) float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Drop every snapshot but the newest of those older than the window.
	for len(w.snaps) > 1 && !w.snaps[1].at.After(now.Add(-w.window)) {
		w.snaps = w.snaps[1:]
	}
	base := w.snaps[0]
	snap := ratioSnap{now, retries, sends}
	if n := len(w.snaps); n > 1 && now.Sub(w.snaps[n-2].at) < w.window/ratioSlots {
		w.snaps[n-1] = snap // the newest within its slot; the first (the zero base) stays
	} else {
		w.snaps = append(w.snaps, snap)
	}
	// A counter below the base means another relay, or a clock stepped
	// back: measure from zero rather than underflow.
	if retries < base.retries || sends < base.sends {
		base = ratioSnap{}
	}
	if sends == base.sends {
		return 0
	}
	// A retry is counted as it starts and its send as it ends, so a
	// snapshot can see more retries than sends for a moment.
	return min(float64(retries-base.retries)/float64(sends-base.sends), 1)
}
