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
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
	oncekvotel "github.com/oncekv/oncekv/otel"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
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

	printSpans(spans, "the key's", tel.TraceID("evt-1"))
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

// printSpans prints each span's name and outcome, and whether it is in
// the trace id of the key named whose.
func printSpans(spans *tracetest.SpanRecorder, whose string, id trace.TraceID) {
	for _, s := range spans.Ended() {
		var outcome string
		for _, kv := range s.Attributes() {
			if kv.Key == oncekvotel.AttrOutcome {
				outcome = kv.Value.AsString()
			}
		}
		fmt.Println(s.Name(), outcome, "in "+whose+" trace:", s.SpanContext().TraceID() == id)
	}
}

// duplicates reads oncekv.duplicates_suppressed of handler.
func duplicates(rm metricdata.ResourceMetrics, handler string) float64 {
	v, _ := value(rm, "oncekv.duplicates_suppressed", attribute.String("handler", handler))
	return v
}

// otelGuide is the code block of docs/otel.md, verbatim (the root's
// TestDocsCodeBlocks compares them); Example_guide runs it. It wires a
// program's telemetry: the store and the outbox observed, the relay's
// sends traced, and the far side's idemhttp behind Middleware.
func otelGuide(tp trace.TracerProvider, mp metric.MeterProvider, store *oncekv.DB, outbox *queue.Queue,
	farURL string, idem *idemhttp.Middleware, pay http.Handler) (*oncekvotel.DB, *relay.Relay, http.Handler, error) {
	tel, err := oncekvotel.New(&oncekvotel.Options{
		TracerProvider: tp, // nil: the global providers
		MeterProvider:  mp,
		KeySecret:      []byte("shared by every process"), // optional: hashes no one can recompute
	})
	if err != nil {
		return nil, nil, nil, err
	}
	if _, err := tel.ObserveDB(store); err != nil { // duplicates, conflicts, the dedup table
		return nil, nil, nil, err
	}
	if _, err := tel.ObserveQueue(outbox); err != nil { // and the dead-letter lag
		return nil, nil, nil, err
	}

	// The relay: each attempt at a message is a span of its key's trace,
	// sent on with traceparent and the key's hash in the baggage.
	send, err := tel.HTTPSender(outbox.Name(), nil, "POST", farURL, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	r, err := relay.New(outbox, send, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	if _, err := tel.ObserveRelay(outbox.Name(), r); err != nil { // the retry ratio
		return nil, nil, nil, err
	}

	// The far side: Middleware in front of idemhttp puts each request in
	// the trace of its key. Consumers call Apply on tel.DB(store).
	return tel.DB(store), r, tel.Middleware(idem.Wrap(pay)), nil
}

// Example_guide runs docs/otel.md's code in one process: the far side's
// server, and an outbox relayed to it. The send and the far side's
// handling of it are two spans of the key's trace.
func Example_guide() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
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
	outbox, err := queue.Open(store, "outbox", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer outbox.Close()
	idem, err := idemhttp.New(store, &idemhttp.Options{Scope: func(*http.Request) (string, error) { return "relay", nil }})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	pay := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
		stop() // the relay finishes this send, acks it, and returns
	})
	var far http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { far.ServeHTTP(w, r) }))
	defer srv.Close()

	db, r, far, err := otelGuide(tp, nil, store, outbox, srv.URL, idem, pay)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := db.Apply(context.Background(), oncekv.Request{Handler: "checkout", Key: "order-7"},
		func(tx *oncekv.Tx) ([]byte, error) {
			_, err := outbox.EnqueueTx(tx, queue.Message{Key: "pay-order-7", Body: []byte(`{"cents":1000}`)})
			return nil, err
		}); err != nil {
		log.Fatal(err)
	}
	if err := r.Run(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("sent:", r.Stats().Sent)

	tel, err := oncekvotel.New(&oncekvotel.Options{KeySecret: []byte("shared by every process")})
	if err != nil {
		log.Fatal(err)
	}
	printSpans(spans, "pay-order-7's", tel.TraceID("pay-order-7"))
	// Output:
	// sent: 1
	// oncekv.apply applied in pay-order-7's trace: false
	// oncekv.http.request applied in pay-order-7's trace: true
	// oncekv.relay.send sent in pay-order-7's trace: true
}
