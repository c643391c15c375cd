package idemhttp

// Exported for the external tests: Retry-After from an error that carries
// the live lease's end (oncekv.InProgressError), or the whole lease.
var (
	RetryAfter        = retryAfter
	RetryAfterSeconds = retryAfterSeconds
)
