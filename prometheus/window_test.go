package prometheus_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// TestWindowMetrics: the duplicates' ages are a histogram per handler,
// and the probe's, the parked keys' and the tombstones' figures are
// exported, with lint-clean names.
func TestWindowMetrics(t *testing.T) {
	db, clock, _ := openStore(t)
	ctx := context.Background()
	for i := range 3 {
		require.NoError(t, apply(db, "orders", fmt.Sprint("o", i), "p", nil))
	}
	clock.Advance(2 * time.Minute)
	require.NoError(t, apply(db, "orders", "o0", "p", nil))
	clock.Advance(40 * time.Minute)
	require.NoError(t, apply(db, "orders", "o1", "p", nil))

	_, err := db.Claim(ctx, oncekv.Request{Handler: "charge", Key: "c1"}, time.Minute)
	require.NoError(t, err)
	clock.Advance(2 * time.Minute)
	_, err = db.ClaimWith(ctx, oncekv.Request{Handler: "charge", Key: "c1"}, time.Minute, &oncekv.ClaimOptions{
		Probe: func(context.Context, string, oncekv.Attempt) (oncekv.Outcome, []byte, error) {
			return oncekv.OutcomeUnknown, nil, nil
		}})
	require.ErrorIs(t, err, oncekv.ErrParked)
	require.ErrorIs(t, apply(db, "charge", "c1", "", nil), oncekv.ErrParked)

	c := newCollector(t, db, nil)
	requireLintClean(t, c)
	want := `
# HELP oncekv_duplicate_age_seconds Age of each duplicate when it came: its time less its key's first delivery. Against Retention, how late redeliveries come (oncekv advise).
# TYPE oncekv_duplicate_age_seconds histogram
` + ageBuckets("charge", nil) + `oncekv_duplicate_age_seconds_sum{handler="charge"} 0
oncekv_duplicate_age_seconds_count{handler="charge"} 0
` + ageBuckets("orders", map[float64]int{300: 1, 3600: 1}) + `oncekv_duplicate_age_seconds_sum{handler="orders"} 2640
oncekv_duplicate_age_seconds_count{handler="orders"} 2
# HELP oncekv_parked_keys Keys parked now, waiting for an operator (oncekv parked, oncekv resolve); at most Options.MaxParked. Non-zero pages someone.
# TYPE oncekv_parked_keys gauge
oncekv_parked_keys 1
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "oncekv_duplicate_age_seconds", "oncekv_parked_keys"))
	require.Equal(t, 1.0, gather(t, c, "oncekv_takeovers_total", map[string]string{"handler": "charge"}))
	require.Equal(t, 1.0, gather(t, c, "oncekv_probe_outcomes_total", map[string]string{"handler": "charge", "outcome": "parked"}))
	require.Equal(t, 1.0, gather(t, c, "oncekv_parked_answers_total", map[string]string{"handler": "charge"}))
	require.Zero(t, gather(t, c, "oncekv_tombstones", nil))
}

// ageBuckets is the bucket lines of oncekv_duplicate_age_seconds for
// handler, cumulative: counts maps the first bound an age falls under to
// how many ages do.
func ageBuckets(handler string, counts map[float64]int) string {
	var b strings.Builder
	run := 0
	for _, bound := range oncekv.AgeBounds() {
		run += counts[bound.Seconds()]
		fmt.Fprintf(&b, "oncekv_duplicate_age_seconds_bucket{handler=%q,le=%q} %d\n", handler, fmt.Sprint(bound.Seconds()), run)
	}
	fmt.Fprintf(&b, "oncekv_duplicate_age_seconds_bucket{handler=%q,le=\"+Inf\"} %d\n", handler, run)
	return b.String()
}
