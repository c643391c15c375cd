// Package idemcore is the transport-neutral core of oncekv's idempotency
// middlewares: what an Idempotency-Key protocol does between a request
// arriving with a key and its answer being stored, whatever carries the
// request (HTTP in package idemhttp; a gRPC interceptor may be built on it
// the same way) and whichever store keeps the records (the embedded
// *oncekv.DB through Embedded, PostgreSQL through the adapter in the
// postgres module). It is internal: users configure a middleware, they do
// not implement this package's interfaces.
//
// # The protocol
//
// A transport builds a Protocol over a Store and, for each request that
// carries a key:
//
//  1. identifies the caller (its scope) and computes the request's
//     fingerprint with a Fingerprint: the fields that make two requests
//     the same request (for HTTP: method, path, query, chosen headers and
//     the body; for gRPC: the full method name, chosen metadata and the
//     marshalled message);
//  2. calls Protocol.Begin with the oncekv.Request
//     {Handler, Key: StoreKey(scope, key), Payload: fingerprint}. Begin
//     claims the key and returns one of:
//     - a replay: the stored response bytes (the transport's own record
//     format; idemhttp's is status, headers and body), to send back
//     without running the handler;
//     - a *Run: the key is claimed, the heartbeat extends its lease every
//     Heartbeat, and Run.Context is the context to run the handler
//     under (cancelled with the cause if the claim is lost to a
//     takeover; it carries the Run, found with FromContext);
//     - an error, which Refuse turns into a Refusal: InProgress (another
//     request holds the key; RetryAfter is the time left on its lease,
//     so answer 409 / ABORTED with Retry-After / retry-after metadata
//     of RetryAfterSeconds), KeyReuse (the key was first used with
//     another fingerprint: 422 / FAILED_PRECONDITION), Unavailable
//     (the store is closed or the caller went away: 503 / UNAVAILABLE)
//     or StoreFailed (500 / INTERNAL);
//  3. runs the handler under Run.Context. The handler may queue writes
//     with Run.Stage (the store decides their type: func(*oncekv.Tx)
//     error on the embedded store, func(context.Context, pgx.Tx) error on
//     PostgreSQL) and may call Run.DoNotStore for a refusal found before
//     any effect;
//  4. calls Run.Close once the handler has returned (or panicked), which
//     stops the heartbeat and the staging, and then exactly one of:
//     Run.Complete with the encoded response, which commits the staged
//     writes and the response in one store transaction (on error the key
//     is released and nothing is kept); Run.Release when the answer must
//     not be kept (a 5xx, a panic, a client gone, a commit refused), so a
//     retry runs afresh at once; Run.Forget when Run.Storing reports false
//     (DoNotStore), which drops the key's mark as if never seen.
//
// A transport must call Run.Release on every path that does not reach
// Complete or Forget, a panic included (a deferred call): otherwise the
// key stays held until its lease runs out and retries get InProgress for a
// request that is not running.
//
// # Stores
//
// Store and Claim are the few calls the protocol makes: claim or replay,
// extend, complete with staged writes, release, forget. Staged writes are
// opaque to the core ([]any); each Store runs the ones of its own type,
// with RunWrites, and refuses others (Accepts). A write's error reaches
// the transport wrapped in a *WriteError, which has no Unwrap: an
// oncekv.Permanent inside must not make the store record the key FAILED,
// since the protocol releases it.
//
// # A gRPC interceptor
//
// A unary server interceptor maps the steps above: the key and the scope
// from the incoming metadata and the authenticated peer; the fingerprint
// from info.FullMethod and the marshalled request; a replay is the stored
// response message (with its status code, in the interceptor's own record
// format) sent without calling the handler; the handler runs with
// Run.Context as its ctx; a non-OK status that must not be kept, a panic
// or a cancelled call is Release; an OK response, marshalled, is
// Complete. Its Stage functions find the Run with FromContext and check
// Run.Store().Accepts, as idemhttp.Stage and pgidem.Stage do.
package idemcore
