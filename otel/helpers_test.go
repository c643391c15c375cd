package otel_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
	oncekvotel "github.com/oncekv/oncekv/otel"
	"github.com/oncekv/oncekv/queue"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// rig is one process's telemetry: a Telemetry on SDK providers whose
// spans go to a recorder and whose metrics to a manual reader.
type rig struct {
	tel    *oncekvotel.Telemetry
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tp     *sdktrace.TracerProvider
}

// tracer is a tracer of the rig's provider, for the test's own spans.
func (r *rig) tracer() trace.Tracer { return r.tp.Tracer("test") }

// newRig returns a rig with opts (nil: defaults) on fresh providers.
func newRig(t *testing.T, opts *oncekvotel.Options) *rig {
	t.Helper()
	r := &rig{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	r.tp = tp
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() {
		require.NoError(t, tp.Shutdown(context.Background()))
		require.NoError(t, mp.Shutdown(context.Background()))
	})
	var o oncekvotel.Options
	if opts != nil {
		o = *opts
	}
	o.TracerProvider, o.MeterProvider = tp, mp
	tel, err := oncekvotel.New(&o)
	require.NoError(t, err)
	r.tel = tel
	return r
}

// ended returns the ended spans named name, in the order they ended.
func (r *rig) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// one returns the only ended span named name.
func (r *rig) one(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := r.ended(name)
	require.Len(t, spans, 1, "spans named %s", name)
	return spans[0]
}

// attrs returns a span's attributes as a map.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// str returns a span's string attribute key, "" when absent.
func str(s sdktrace.ReadOnlySpan, key attribute.Key) string { return attrs(s)[key].AsString() }

// requireNoKey fails if key appears anywhere in the recorded spans: in an
// attribute, an event's, a link's, or a status.
func requireNoKey(t *testing.T, r *rig, key string) {
	t.Helper()
	check := func(where string, kvs []attribute.KeyValue) {
		for _, kv := range kvs {
			require.NotContains(t, kv.Value.String(), key, "%s attribute %s", where, kv.Key)
		}
	}
	for _, s := range r.spans.Ended() {
		check(s.Name(), s.Attributes())
		for _, e := range s.Events() {
			check(s.Name()+" event "+e.Name, e.Attributes)
		}
		for _, l := range s.Links() {
			check(s.Name()+" link", l.Attributes)
		}
		require.NotContains(t, s.Status().Description, key, "%s status", s.Name())
	}
}

// collect reads every metric once.
func (r *rig) collect(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.reader.Collect(context.Background(), &rm))
	return rm
}

// value returns the value of metric name whose attributes include want,
// and whether there is one.
func value(rm metricdata.ResourceMetrics, name string, want ...attribute.KeyValue) (float64, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			var points []metricdata.DataPoint[float64]
			switch d := m.Data.(type) {
			case metricdata.Sum[float64]:
				points = d.DataPoints
			case metricdata.Gauge[float64]:
				points = d.DataPoints
			}
		points:
			for _, p := range points {
				for _, kv := range want {
					if v, ok := p.Attributes.Value(kv.Key); !ok || v != kv.Value {
						continue points
					}
				}
				return p.Value, true
			}
		}
	}
	return 0, false
}

// metricValue is value that fails the test when there is none.
func metricValue(t *testing.T, rm metricdata.ResourceMetrics, name string, want ...attribute.KeyValue) float64 {
	t.Helper()
	v, ok := value(rm, name, want...)
	require.True(t, ok, "no point of %s with %v", name, want)
	return v
}

// store is a store on a fake clock with timers, for queues too.
type store struct {
	db    *oncekv.DB
	clock *oncetest.Timers
	path  string
}

func openStore(t *testing.T) *store {
	t.Helper()
	s := &store{clock: oncetest.NewTimers(t0), path: filepath.Join(t.TempDir(), "otel.db")}
	db, err := oncekv.Open(s.path, &oncekv.Options{NoSync: true, Now: s.clock.Now, ExpireInterval: -1})
	require.NoError(t, err)
	s.db = db
	t.Cleanup(func() {
		require.NoError(t, db.Close())
		oncetest.Check(t, s.path)
	})
	return s
}

// queue opens queue name in the store with opts, its timers on the fake
// clock.
func (s *store) queue(t *testing.T, name string, opts *queue.Options) *queue.Queue {
	t.Helper()
	var o queue.Options
	if opts != nil {
		o = *opts
	}
	o.Timer = s.clock.Timer
	q, err := queue.Open(s.db, name, &o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q.Close()) })
	return q
}

// put is an effect that writes value under key in bucket "data".
func put(key, value string) func(tx *oncekv.Tx) ([]byte, error) {
	return func(tx *oncekv.Tx) ([]byte, error) {
		b, err := tx.CreateBucketIfNotExists([]byte("data"))
		if err != nil {
			return nil, err
		}
		return []byte("ok " + value), b.Put([]byte(key), []byte(value))
	}
}

// hasEvent reports whether s has an event named name.
func hasEvent(s sdktrace.ReadOnlySpan, name string) bool {
	for _, e := range s.Events() {
		if e.Name == name {
			return true
		}
	}
	return false
}

// keyLike is a key made of letters that cannot appear in a hex hash, so
// that finding it in a span means the key leaked.
func keyLike(n int) string { return "order-" + strings.Repeat("x", n) }
