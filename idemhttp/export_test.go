package idemhttp

import "github.com/oncekv/oncekv/internal/idemcore"

// Exported for the external tests: Retry-After from an error that carries
// the live lease's end (oncekv.InProgressError), or the whole lease.
var (
	RetryAfter        = idemcore.RetryAfter
	RetryAfterSeconds = idemcore.RetryAfterSeconds
)
