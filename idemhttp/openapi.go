package idemhttp

import (
	"encoding/json"
	"fmt"
	"net/http"

	"strings"
	"time"

	"github.com/oncekv/oncekv/internal/idemcore"
)

// The names of the components of the OpenAPI fragment (Middleware.OpenAPI):
// an operation the middleware covers references them, as
// "#/components/parameters/" + OpenAPIKeyParameter and so on.
const (
	// OpenAPIKeyParameter is the Idempotency-Key request header.
	OpenAPIKeyParameter = "IdempotencyKey"
	// OpenAPIProblemSchema is the RFC 9457 problem every error answer is.
	OpenAPIProblemSchema = "IdempotencyProblem"

	// The response headers. The first three go on the operation's own
	// stored responses, which replays repeat; the last is on
	// OpenAPIInProgress already.
	OpenAPIReplayedHeader    = "IdempotentReplayed"          // HeaderReplayed
	OpenAPIBodyOmittedHeader = "IdempotentReplayBodyOmitted" // HeaderReplayBodyOmitted
	OpenAPIKeyExpiresHeader  = "IdempotencyKeyExpires"       // HeaderKeyExpires
	OpenAPIRetryAfterHeader  = "IdempotencyRetryAfter"       // HeaderRetryAfter

	// The error responses, one per status.
	OpenAPIBadRequest   = "IdempotencyBadRequest"   // 400: ProblemKeyMissing, ProblemKeyInvalid, ProblemBodyUnreadable
	OpenAPIUnidentified = "IdempotencyUnidentified" // 401: ProblemUnidentified
	OpenAPIInProgress   = "IdempotencyInProgress"   // 409: ProblemInProgress, with Retry-After
	OpenAPIResponseGone = "IdempotencyResponseGone" // 410: ProblemResponseExpired
	OpenAPIBodyTooLarge = "IdempotencyBodyTooLarge" // 413: ProblemBodyTooLarge
	OpenAPIKeyReuse     = "IdempotencyKeyReuse"     // 422: ProblemKeyReuse
	OpenAPIStoreFailed  = "IdempotencyStoreFailed"  // 500: ProblemStoreFailed
	OpenAPIUnavailable  = "IdempotencyUnavailable"  // 503: ProblemUnavailable
)

// problemMediaType is the media type of every error answer.
const problemMediaType = "application/problem+json"

// imfFixdate is the pattern of an IMF-fixdate (RFC 9110 section 5.6.7),
// the form of HTTP-date a server sends.
const imfFixdate = `^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), [0-9]{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT$`

// OpenAPI returns an OpenAPI 3.1 fragment, as JSON, describing what the
// middleware promises with its options: a document holding only a
// "components" object, to merge into an API's own document. It has the
// Idempotency-Key header parameter (required when Options.RequireKey), the
// response headers (HeaderReplayed, HeaderReplayBodyOmitted,
// HeaderKeyExpires, and Retry-After bounded by Options.Lease), the
// problem schema, and the 400, 401, 409, 413, 422, 500 and 503 responses
// whose bodies are application/problem+json with the type URIs of each
// case (the Problem... constants). The components are named by the
// OpenAPI... constants; an operation the middleware covers references the
// parameter and the responses, and adds the three headers to its stored
// responses, which replays repeat (docs/http.md has the whole recipe). The
// same options give the same bytes.
//
// Errors: ErrInvalidOptions for a Middleware not made by New.
func (m *Middleware) OpenAPI() ([]byte, error) {
	if m == nil || m.db == nil {
		return nil, fmt.Errorf("%w: OpenAPI on a Middleware not made by New", ErrInvalidOptions)
	}
	return json.MarshalIndent(map[string]any{"components": m.openAPIComponents()}, "", "  ")
}

// openAPIComponents is the fragment's components object.
func (m *Middleware) openAPIComponents() map[string]any {
	o := &m.opts
	leaseSecs := idemcore.RetryAfterSeconds(o.Lease)
	ref := func(kind, name string) map[string]any {
		return map[string]any{"$ref": "#/components/" + kind + "/" + name}
	}
	trueFlag := func(desc string) map[string]any {
		return map[string]any{"description": desc, "schema": map[string]any{"type": "string", "enum": []string{"true"}}}
	}
	badRequest := []string{ProblemKeyInvalid, ProblemBodyUnreadable}
	badWhen := "the Idempotency-Key is malformed (empty, over 255 bytes unquoted, not printable ASCII, a bad quoted string) or sent twice (" +
		ProblemKeyInvalid + "), or the body could not be read (" + ProblemBodyUnreadable + ")"
	if o.RequireKey {
		badRequest = append([]string{ProblemKeyMissing}, badRequest...)
		badWhen = "the request has no Idempotency-Key (" + ProblemKeyMissing + "); " + badWhen
	}
	problem := func(status int, desc string, types []string, headers map[string]any) map[string]any {
		r := map[string]any{
			"description": desc,
			"content": map[string]any{problemMediaType: map[string]any{"schema": map[string]any{
				"allOf": []any{
					ref("schemas", OpenAPIProblemSchema),
					map[string]any{"properties": map[string]any{
						"type":   map[string]any{"type": "string", "enum": types},
						"status": map[string]any{"type": "integer", "enum": []int{status}},
					}},
				},
			}}},
		}
		if headers != nil {
			r["headers"] = headers
		}
		return r
	}
	return map[string]any{
		"parameters": map[string]any{
			OpenAPIKeyParameter: map[string]any{
				"name":     HeaderKey,
				"in":       "header",
				"required": o.RequireKey,
				"description": "A key the client mints once per operation (a UUID) and sends again on every retry of it. " +
					"The first request with a key runs; a retry gets the stored answer back with " + HeaderReplayed + ": true " +
					"until the date in " + HeaderKeyExpires + " (the key's first use plus " + days(m.retention) + "). " +
					"Keys are kept per caller. A bare value and a structured-field string (\"...\") name the same key: " +
					fmt.Sprintf("1 to %d printable ASCII bytes unquoted. ", MaxKeyLen) + m.openAPICoverage(),
				"schema": map[string]any{
					"type":      "string",
					"minLength": 1,
					"maxLength": 2*MaxKeyLen + 2, // quoted, every byte escaped
					"pattern":   `^[ -~]+$`,
				},
			},
		},
		"headers": map[string]any{
			OpenAPIReplayedHeader: trueFlag("Present on a response replayed from the store: the operation did not run for this request."),
			OpenAPIBodyOmittedHeader: trueFlag(fmt.Sprintf("Present on a replay of a response whose body was over %d bytes: "+
				"the status and headers are the first answer's, the body is empty.", o.MaxRecordBytes)),
			OpenAPIKeyExpiresHeader: map[string]any{
				"description": "On a stored answer and its replays: until this HTTP-date a retry with the same key and request gets this answer back; " +
					"after it the key may be forgotten and a retry may run the operation again. The key's first use plus " + days(m.retention) + ".",
				"schema": map[string]any{"type": "string", "pattern": imfFixdate},
			},
			OpenAPIRetryAfterHeader: map[string]any{
				"description": "Seconds until the running request's lease ends, when a retry may be answered.",
				"required":    true,
				"schema":      map[string]any{"type": "integer", "minimum": 1, "maximum": leaseSecs},
			},
		},
		"schemas": map[string]any{
			OpenAPIProblemSchema: map[string]any{
				"description": "An RFC 9457 problem details object; type is one of the idempotency problem type URIs.",
				"type":        "object",
				"required":    []string{"type", "title", "status"},
				"properties": map[string]any{
					"type":   map[string]any{"type": "string", "enum": allProblems()},
					"title":  map[string]any{"type": "string"},
					"status": map[string]any{"type": "integer"},
					"detail": map[string]any{"type": "string"},
				},
			},
		},
		"responses": map[string]any{
			OpenAPIBadRequest: problem(http.StatusBadRequest, "Refused before running: "+badWhen+". Nothing is recorded.", badRequest, nil),
			OpenAPIUnidentified: problem(http.StatusUnauthorized, "The caller could not be identified, and keys are kept per caller. Nothing is recorded.",
				[]string{ProblemUnidentified}, nil),
			OpenAPIInProgress: problem(http.StatusConflict, "A request with this key is running now. Retry after Retry-After seconds; the request needs no change.",
				[]string{ProblemInProgress}, map[string]any{HeaderRetryAfter: ref("headers", OpenAPIRetryAfterHeader)}),
			OpenAPIResponseGone: problem(http.StatusGone, "A request with this key was applied, but its stored answer has expired (only a tombstone is left). "+
				"It is not run again; use a new key for a new operation.", []string{ProblemResponseExpired}, nil),
			OpenAPIBodyTooLarge: problem(http.StatusRequestEntityTooLarge, fmt.Sprintf("The request body is over %d bytes. Nothing is recorded.", o.MaxBodyBytes),
				[]string{ProblemBodyTooLarge}, nil),
			OpenAPIKeyReuse: problem(http.StatusUnprocessableEntity, "The key was first used with another request ("+m.openAPIFingerprint()+"). "+
				"Send the first request again to get its answer, or use a new key for a new operation.", []string{ProblemKeyReuse}, nil),
			OpenAPIStoreFailed: problem(http.StatusInternalServerError, "The answer could not be recorded or read back; nothing was kept and a retry runs again.",
				[]string{ProblemStoreFailed}, nil),
			OpenAPIUnavailable: problem(http.StatusServiceUnavailable, "The store is closed, or the request was cancelled before its key was claimed; retry it.",
				[]string{ProblemUnavailable}, nil),
		},
	}
}

// openAPICoverage says which methods the middleware covers.
func (m *Middleware) openAPICoverage() string {
	return "Covered methods: " + strings.Join(m.opts.Methods, ", ") + "."
}

// openAPIFingerprint says what makes two requests the same request.
func (m *Middleware) openAPIFingerprint() string {
	s := "method, path, query or body"
	if len(m.fingerprint) > 0 {
		s += ", or the headers " + strings.Join(m.fingerprint, ", ")
	}
	return s
}

// days writes d in days or hours when it is a whole number of them, as
// retentions usually are.
func days(d time.Duration) string {
	switch {
	case d == 24*time.Hour:
		return "1 day"
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	}
	return d.String()
}

// allProblems lists every problem type the middleware answers with.
func allProblems() []string {
	return []string{ProblemKeyMissing, ProblemKeyInvalid, ProblemBodyUnreadable, ProblemUnidentified, ProblemInProgress,
		ProblemResponseExpired, ProblemBodyTooLarge, ProblemKeyReuse, ProblemStoreFailed, ProblemUnavailable}
}
