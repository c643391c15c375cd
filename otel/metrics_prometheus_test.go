package otel_test

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/otlptranslator"
	"github.com/stretchr/testify/require"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	oncekvotel "github.com/oncekv/oncekv/otel"
	oncekvprom "github.com/oncekv/oncekv/prometheus"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/retry"
)

// changing lists the series that change by being read: every Stats call
// starts read transactions.
var changing = map[string]bool{"oncekv_db_read_transactions_total": true, "oncekv_db_open_read_transactions": true}

// TestNamesAndValuesAreThePrometheusModules exports one store and queue
// through the Prometheus module's collector and through this package's
// instruments with OpenTelemetry's Prometheus exporter (underscore
// escaping with suffixes, Prometheus's own translation of OTLP names), and
// requires every family of the first in the second: same name, type,
// labels and values. The commit histograms are the exception the package
// doc names: OpenTelemetry has no asynchronous histogram.
func TestNamesAndValuesAreThePrometheusModules(t *testing.T) {
	s := openStore(t)
	drive(t, s.db)
	q := s.queue(t, "jobs", nil)
	ctx := context.Background()
	for _, k := range []string{"a", "b"} {
		_, err := q.Enqueue(ctx, queue.Message{Key: k, Body: []byte(k)})
		require.NoError(t, err)
	}
	m, err := q.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, q.Nack(ctx, m, retry.Permanent(errors.New("poison"))))

	direct := prom.NewPedanticRegistry()
	c, err := oncekvprom.New(s.db, nil)
	require.NoError(t, err)
	require.NoError(t, c.AddQueue(q))
	require.NoError(t, direct.Register(c))

	viaOTel := prom.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(viaOTel), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo(),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	require.NoError(t, err)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	t.Cleanup(func() { require.NoError(t, mp.Shutdown(context.Background())) })
	tel, err := oncekvotel.New(&oncekvotel.Options{MeterProvider: mp})
	require.NoError(t, err)
	_, err = tel.ObserveDB(s.db)
	require.NoError(t, err)
	_, err = tel.ObserveQueue(q)
	require.NoError(t, err)

	want := gather(t, direct)
	got := gather(t, viaOTel)
	for name, fam := range want {
		if fam.GetType() == dto.MetricType_HISTOGRAM {
			require.NotContains(t, got, name)
			continue
		}
		g, ok := got[name]
		require.True(t, ok, "the Prometheus module's %s is missing from the OpenTelemetry export", name)
		require.Equal(t, fam.GetType(), g.GetType(), name)
		require.Equal(t, series(fam), series(g), "%s: labels and values", name)
	}
	require.Contains(t, got, "oncekv_queue_oldest_dead_letter_age_seconds", "the dead-letter lag, which the module lacks today")
}

func gather(t *testing.T, g prom.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := g.Gather()
	require.NoError(t, err)
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// series renders a family's series as "labels=value" lines, sorted;
// values of the changing series are left out.
func series(f *dto.MetricFamily) []string {
	var out []string
	for _, m := range f.GetMetric() {
		var labels []string
		for _, l := range m.GetLabel() {
			labels = append(labels, l.GetName()+"="+l.GetValue())
		}
		sort.Strings(labels)
		v := ""
		if !changing[f.GetName()] {
			switch {
			case m.GetCounter() != nil:
				v = strconv.FormatFloat(m.GetCounter().GetValue(), 'g', -1, 64)
			case m.GetGauge() != nil:
				v = strconv.FormatFloat(m.GetGauge().GetValue(), 'g', -1, 64)
			}
		}
		out = append(out, strings.Join(labels, ",")+"="+v)
	}
	sort.Strings(out)
	return out
}
