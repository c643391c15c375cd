package idemgrpc

// The metadata names of the protocol, lower case as gRPC metadata keys are.
const (
	// KeyMetadata carries the client's idempotency key.
	KeyMetadata = "idempotency-key"
	// ReplayedTrailer is set to "true" on an answer replayed from the
	// store.
	ReplayedTrailer = "idempotent-replayed"
	// PushbackTrailer is grpc-go's retry pushback: the milliseconds a
	// client should wait before retrying a key still held.
	PushbackTrailer = "grpc-retry-pushback-ms"
)
