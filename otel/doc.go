// Package otel records oncekv's traces and metrics through OpenTelemetry.
// It is a module of its own, so the core and its satellites stay on the
// standard library; it builds on their public APIs only.
//
//	import oncekvotel "github.com/oncekv/oncekv/otel"
//
//	tel, err := oncekvotel.New(nil) // the global providers; see Options
//	db := tel.DB(store)             // Apply, ApplyBatch, Claim in spans
//	q := tel.Queue(outbox)          // Receive, Ack, Nack, Enqueue in spans
//	send, err := tel.HTTPSender("outbox", nil, "POST", url, nil)
//	http.Handle("/pay", tel.Middleware(idem.Wrap(pay)))
//	reg, err := tel.ObserveDB(store) // the article's metrics
//
// # Spans
//
// Every span about a key carries oncekv.key_hash (the key itself only with
// Options.RecordKeys) and joins the key's operation trace, whose ID is
// derived from the key: every retry of one logical operation, in any
// process, after any crash, takeover or redrive, shows in one trace (see
// Telemetry.Start for the rule, and TraceID to find it). Outcomes
// (applied, duplicate, in_progress, key_reuse, fenced, ...) say how each
// call ended, with oncekv.Classify's action.
//
// The relay's HTTP sender writes the trace context and the key's hash
// into W3C traceparent and baggage headers; Middleware, in front of
// idemhttp, reads them, so the far side's spans are children of the
// attempt that sent the request.
//
// # Metrics
//
// ObserveDB, ObserveQueue and ObserveRelay register asynchronous
// instruments read from oncekv.Stats, queue.Stats and relay.Stats at each
// collection: the Prometheus module's metrics under the same names (once
// an exporter writes dots as underscores and adds units and _total), the
// dead-letter lag and the relay's retry ratio.
//
// # Caveats
//
//   - An operation trace has no root span: its spans' parent is a
//     placeholder, derived from the key, that nothing records. Tracing UIs
//     show the attempts as the trace's top spans, some with a note that
//     their parent is missing.
//   - A key's trace ID is a hash of the key: with a guessable key and no
//     Options.KeySecret, whoever reads the traces can confirm a guess.
//   - The commit histograms of oncekv.Stats are not exported: the
//     OpenTelemetry API has no asynchronous histogram. The Prometheus
//     module exports them.
//
// docs/otel.md tells the design: what is recorded, the key or its hash,
// how retries join one trace, and where that ends.
package otel
