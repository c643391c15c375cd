// Package idemgrpc makes retried unary gRPC calls apply their effect once:
// a server interceptor with the semantics of package idemhttp's
// Idempotency-Key middleware, and a client interceptor that gives each
// logical call one key, kept across every retry.
//
// A client sends the key in the "idempotency-key" metadata entry. The
// server interceptor keys its record by (caller, key), the caller coming
// from Options.Scope (the authenticated user or account), so one caller's
// key never answers another's. The first call with a key claims it, runs
// the handler and stores its answer (the response message, or the status
// of an error that Options.Store keeps); every later call with the key and
// the same request gets that answer back without the handler running, with
// the trailer "idempotent-replayed: true". A call while the first still
// runs is answered at once with ABORTED and the trailer
// "grpc-retry-pushback-ms" set to the time left on the running call's
// lease, which grpc-go's retry policy honours. Another request under a key
// already used (its method, chosen metadata or message differ) gets
// FAILED_PRECONDITION; a call without a key gets INVALID_ARGUMENT when
// Options.RequireKey is set, and passes through otherwise. A call whose
// key's answer expired while its tombstone still says it was applied
// (oncekv.Options.TombstoneRetention) gets ALREADY_EXISTS: it is not run
// again.
//
// A handler's own store writes, staged with Stage, commit in the
// transaction that stores its answer: both or neither. A handler that
// fails with a status Options.Store does not keep (by default the server's
// errors: Unknown, DeadlineExceeded, ResourceExhausted, Aborted, Internal,
// Unavailable, DataLoss), panics, or whose caller went away releases the
// key, and the retry runs it afresh. A server killed mid-handler leaves
// the key claimed until its lease ends (the embedded store releases it
// when the file is opened again); then the retry takes it over.
//
// The client interceptor adds a key to a call that has none. grpc-go's
// transparent and policy retries resend the same metadata, so they keep
// it; the caller's own retry loop must mint the key once, before the loop,
// with WithNewKey (a key minted inside the loop makes every attempt a new
// request: the article's first typical mistake).
//
// The guarantee ends where the store's does: an effect outside the
// store's transaction (a call to another service) must be made idempotent
// with Key, the claim's stable id, passed downstream.
package idemgrpc
