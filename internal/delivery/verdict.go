// Package delivery holds what the transport adapters (the kafka, sqs and
// rabbitmq modules) share about consuming: the verdict on one delivery,
// the batch applied through one DB.ApplyBatch, the guard that lets one Run
// at a time, and the pieces of their errors and logs that are the same.
// Each adapter keeps its own exported names, as aliases or thin callers of
// these, so its users never import this package.
package delivery

import "fmt"

// Verdict says what became of one delivery of a batch. What each verdict
// means for the broker (an offset committed, a message deleted) is the
// adapter's to say.
type Verdict uint8

// The verdicts.
const (
	// Applied: the effect ran and committed with the delivery's mark.
	Applied Verdict = iota
	// Duplicate: the key was applied before; the effect did not run.
	Duplicate
	// GaveUp: the delivery can never succeed.
	GaveUp
	// Retry: the delivery failed in a way a retry can fix.
	Retry
)

// String returns the verdict's name.
func (v Verdict) String() string {
	switch v {
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	case GaveUp:
		return "gave up"
	case Retry:
		return "retry"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}
