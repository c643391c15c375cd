// Package idemhttp is an HTTP Idempotency-Key middleware on an oncekv store,
// following the IETF draft "The Idempotency-Key HTTP Header Field": a client
// that retries a POST after a timeout, or a user who clicks "Pay" twice,
// gets the first answer back instead of a second charge. It uses the
// standard library only; the root package never imports it.
//
// New builds the middleware and Middleware.Wrap puts it in front of a
// handler. The first request of a (caller, key), the caller named by
// Options.Scope, runs the handler under an oncekv Claim; its response and
// the writes it queued with Stage commit in one transaction before the
// client sees the response, and every retry gets that response back, with
// "Idempotent-Replayed: true", without running the handler. A key still
// running gets 409 with Retry-After, a key reused with another request
// 422; every error answer is an RFC 9457 problem whose type is one of the
// Problem... constants. A 5xx, a panic or a client that went away stores
// nothing and releases the key. Key(r) is the id to hand external systems
// as their idempotency key, Token(r) the claim's fencing token: never the
// token as the key.
//
// Stored answers and their replays carry Idempotency-Key-Expires, the
// date until which a retry gets them back (HeaderKeyExpires), and
// Middleware.OpenAPI writes the whole contract, headers, problem types
// and all, as an OpenAPI 3.1 fragment built from the options.
//
// ExampleNew is a payments endpoint. The guide, docs/http.md in the
// repository, lists every answer, what is stored and for how long.
package idemhttp
