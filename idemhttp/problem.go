package idemhttp

import (
	"encoding/json"
	"net/http"
)

// Problem types: the "type" of the RFC 9457 problem details the middleware
// answers with, one per case.
const (
	// ProblemKeyMissing (400): the route requires an Idempotency-Key
	// (Options.RequireKey) and the request had none.
	ProblemKeyMissing = "urn:oncekv:idemhttp:key-missing"
	// ProblemKeyInvalid (400): the Idempotency-Key is malformed or given
	// more than once.
	ProblemKeyInvalid = "urn:oncekv:idemhttp:key-invalid"
	// ProblemBodyUnreadable (400): the request body could not be read.
	ProblemBodyUnreadable = "urn:oncekv:idemhttp:body-unreadable"
	// ProblemUnidentified (401): Options.Scope could not identify the
	// caller, and keys are kept per caller.
	ProblemUnidentified = "urn:oncekv:idemhttp:caller-unidentified"
	// ProblemInProgress (409): a request with the same key is running;
	// Retry-After says when to come back.
	ProblemInProgress = "urn:oncekv:idemhttp:in-progress"
	// ProblemResponseExpired (410): the request was applied, but its
	// stored response has expired (only a tombstone is left, see
	// oncekv.Options.TombstoneRetention); it is not run again.
	ProblemResponseExpired = "urn:oncekv:idemhttp:response-expired"
	// ProblemBodyTooLarge (413): the body is over Options.MaxBodyBytes.
	ProblemBodyTooLarge = "urn:oncekv:idemhttp:body-too-large"
	// ProblemKeyReuse (422): the key was first used with another request.
	ProblemKeyReuse = "urn:oncekv:idemhttp:key-reuse"
	// ProblemStoreFailed (500): the store could not record or read the
	// response; nothing was kept, and a retry runs again.
	ProblemStoreFailed = "urn:oncekv:idemhttp:store-failed"
	// ProblemUnavailable (503): the store is closed or the request was
	// cancelled before its key was claimed.
	ProblemUnavailable = "urn:oncekv:idemhttp:unavailable"
)

// problem is an RFC 9457 problem details object.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// writeProblem answers with a problem details document.
func writeProblem(w http.ResponseWriter, typ string, status int, detail string) {
	body, _ := json.Marshal(problem{Type: typ, Title: http.StatusText(status), Status: status, Detail: detail})
	h := w.Header()
	h.Set("Content-Type", problemMediaType)
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
