package otel

import (
	global "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of every tracer and meter this
// package makes.
const ScopeName = "github.com/oncekv/oncekv/otel"

// Telemetry records oncekv's spans and metrics through one tracer, one
// meter and one propagator, with one policy for keys. Make one with New
// and share it: it is safe for concurrent use, and holds no state per key.
type Telemetry struct {
	opts   Options
	tracer trace.Tracer
	meter  metric.Meter
	prop   propagation.TextMapPropagator
	inst   *instruments
}

// New returns a Telemetry configured by opts (nil: every default). It
// creates the tracer, the meter and the instruments ObserveDB,
// ObserveQueue and ObserveRelay report through. Errors: ErrInvalidOptions
// listing every bad field; the meter's error for an instrument it refused.
func New(opts *Options) (*Telemetry, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if o.TracerProvider == nil {
		o.TracerProvider = global.GetTracerProvider()
	}
	if o.MeterProvider == nil {
		o.MeterProvider = global.GetMeterProvider()
	}
	if o.Propagator == nil {
		o.Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	t := &Telemetry{
		opts:   o,
		tracer: o.TracerProvider.Tracer(ScopeName),
		meter:  o.MeterProvider.Meter(ScopeName),
		prop:   o.Propagator,
	}
	if t.inst, err = newInstruments(t.meter); err != nil {
		return nil, err
	}
	return t, nil
}

// Propagator returns the propagator Transport and Middleware use, for a
// transport of another kind (gRPC metadata, message headers) to inject
// and extract the same trace context and baggage.
func (t *Telemetry) Propagator() propagation.TextMapPropagator { return t.prop }
