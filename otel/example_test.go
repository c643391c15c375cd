package otel_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
	oncekvotel "github.com/oncekv/oncekv/otel"
	"github.com/oncekv/oncekv/queue"
)

// A consumer's store with spans and metrics: a delivery and its
// redelivery are two spans of one trace, the key's, and the duplicate is
// counted.
func Example() {
	// The example's providers keep everything in memory; a program gives
	// its own (an OTLP exporter) or leaves them nil for the global ones.
	spans := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	tel, err := oncekvotel.New(&oncekvotel.Options{
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	if err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "oncekv-otel")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := oncekv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	reg, err := tel.ObserveDB(store)
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Unregister()

	db := tel.DB(store) // Apply as before, in a span
	req := oncekv.Request{Handler: "deposit", Key: "evt-1", Payload: []byte("10")}
	for range 2 { // a delivery, and the broker's redelivery
		if _, err := db.Apply(context.Background(), req, func(tx *oncekv.Tx) ([]byte, error) {
			b, err := tx.CreateBucketIfNotExists([]byte("balances"))
			if err != nil {
				return nil, err
			}
			return []byte("ok"), b.Put([]byte("alice"), []byte("10"))
		}); err != nil {
			log.Fatal(err)
		}
	}

	for _, s := range spans.Ended() {
		var outcome string
		for _, kv := range s.Attributes() {
			if kv.Key == oncekvotel.AttrOutcome {
				outcome = kv.Value.AsString()
			}
		}
		fmt.Println(s.Name(), outcome, "in the key's trace:", s.SpanContext().TraceID() == tel.TraceID("evt-1"))
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	fmt.Println("duplicates suppressed:", duplicates(rm, "deposit"))
	// Output:
	// oncekv.apply applied in the key's trace: true
	// oncekv.apply duplicate in the key's trace: true
	// duplicates suppressed: 1
}

// duplicates reads oncekv.duplicates_suppressed of handler.
func duplicates(rm metricdata.ResourceMetrics, handler string) float64 {
	v, _ := value(rm, "oncekv.duplicates_suppressed", attribute.String("handler", handler))
	return v
}

// The relay's side and the far side's: HTTPSender sends the message with
// the trace context and the key's hash, and Middleware, in front of
// idemhttp, puts the far side's span in the same trace.
func ExampleTelemetry_Middleware() {
	spans := tracetest.NewSpanRecorder()
	tel, err := oncekvotel.New(&oncekvotel.Options{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))})
	if err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "oncekv-otel")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := oncekv.Open(filepath.Join(dir, "far.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	// The far side: Middleware in front of idemhttp.
	idem, err := idemhttp.New(store, &idemhttp.Options{Scope: func(*http.Request) (string, error) { return "relay", nil }})
	if err != nil {
		log.Fatal(err)
	}
	pay := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })
	srv := httptest.NewServer(tel.Middleware(idem.Wrap(pay)))
	defer srv.Close()

	// The relay's side: give send to relay.New(outbox, send, nil). Here it
	// is called by hand, twice: a send and its retry.
	send, err := tel.HTTPSender("outbox", srv.Client(), "POST", srv.URL, nil)
	if err != nil {
		log.Fatal(err)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		m := &queue.Message{ID: 1, Key: "pay-42", Body: []byte(`{"cents":1000}`), Attempt: attempt, Token: uint64(attempt)}
		if err := send(context.Background(), m); err != nil {
			log.Fatal(err)
		}
	}

	for _, s := range spans.Ended() {
		var outcome string
		for _, kv := range s.Attributes() {
			if kv.Key == oncekvotel.AttrOutcome {
				outcome = kv.Value.AsString()
			}
		}
		fmt.Println(s.Name(), outcome, "in the key's trace:", s.SpanContext().TraceID() == tel.TraceID("pay-42"))
	}
	// Output:
	// oncekv.http.request applied in the key's trace: true
	// oncekv.relay.send sent in the key's trace: true
	// oncekv.http.request duplicate in the key's trace: true
	// oncekv.relay.send sent in the key's trace: true
}
