package prometheus_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// TestDashboardNamesOnlyExportedMetrics parses dashboard.json and checks
// that every PromQL expression in it (panel targets and template queries)
// names only metrics the Collector exports, so a renamed metric cannot leave
// a silently empty panel.
func TestDashboardNamesOnlyExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile("dashboard.json")
	require.NoError(t, err)
	var dash any
	require.NoError(t, json.Unmarshal(raw, &dash))

	db, clock, _ := openStore(t)
	drive(t, db)
	c := newCollector(t, db, nil)
	require.NoError(t, c.AddQueue(driveQueue(t, db, clock.Advance, "jobs")))
	reg := prom.NewRegistry()
	require.NoError(t, reg.Register(c))
	families, err := reg.Gather()
	require.NoError(t, err)
	exported := map[string]bool{}
	for _, f := range families {
		exported[f.GetName()] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				exported[f.GetName()+suffix] = true
			}
		}
	}

	var exprs []string
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				walk(x, k)
			}
		case []any:
			for _, x := range v {
				walk(x, key)
			}
		case string:
			if key == "expr" || (key == "query" && strings.Contains(v, "(")) {
				exprs = append(exprs, v)
			}
		}
	}
	walk(dash, "")
	require.GreaterOrEqual(t, len(exprs), 10, "the dashboard has its panels")

	name := regexp.MustCompile(`\boncekv_[a-z_]+`)
	used := map[string]bool{}
	for _, e := range exprs {
		found := name.FindAllString(e, -1)
		require.NotEmpty(t, found, "expression names no oncekv metric: %s", e)
		for _, n := range found {
			require.True(t, exported[n], "%s in %q is not exported by the collector", n, e)
			used[n] = true
		}
	}
	for _, must := range []string{"oncekv_apply_total", "oncekv_duplicates_suppressed_total", "oncekv_commit_duration_seconds_bucket",
		"oncekv_live_marks", "oncekv_db_size_bytes", "oncekv_db_free_bytes", "oncekv_clock_jumps_total",
		"oncekv_queue_ready", "oncekv_queue_in_flight", "oncekv_queue_delayed", "oncekv_queue_dead",
		"oncekv_queue_oldest_visible_age_seconds", "oncekv_queue_enqueued_total", "oncekv_queue_acked_total",
		"oncekv_queue_nacked_total", "oncekv_queue_expired_total", "oncekv_queue_dead_lettered_total",
		"oncekv_queue_redriven_total"} {
		require.True(t, used[must], "the dashboard shows %s", must)
	}
}
