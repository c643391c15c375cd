package idemhttp

// Exported for the external tests: Retry-After from an error that carries
// the live lease's end, which the store does not return yet.
var (
	RetryAfter        = retryAfter
	RetryAfterSeconds = retryAfterSeconds
)
