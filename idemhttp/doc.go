// Package idemhttp is an HTTP Idempotency-Key middleware on an oncekv store,
// following the IETF draft "The Idempotency-Key HTTP Header Field": a client
// that retries a POST after a timeout, or a user who clicks "Pay" twice,
// gets the first answer back instead of a second charge.
//
//	mw, err := idemhttp.New(db, &idemhttp.Options{
//		Scope: func(r *http.Request) (string, error) { return userID(r) },
//	})
//	...
//	mux.Handle("/payments", mw.Wrap(payments))
//
// (Example_mount is this snippet, compiled and run.)
//
// # What a request meets
//
// Only the methods in Options.Methods (POST and PATCH by default) are
// covered; others pass straight through. A covered request:
//
//   - without an Idempotency-Key header passes through, or gets 400 when
//     Options.RequireKey is set. A malformed key (empty, longer than
//     MaxKeyLen bytes, not printable ASCII, or the header given twice) gets
//     400. The key may be sent bare (as Stripe's clients do) or as the
//     draft's quoted structured-field string; both name the same key.
//   - whose caller Options.Scope cannot identify gets 401, and the handler
//     does not run. Records are keyed by (scope, key): a key sent by
//     another caller is another record, never someone else's response.
//   - with a body over Options.MaxBodyBytes (1 MiB by default) gets 413
//     before anything is recorded.
//   - reusing a key with another fingerprint gets 422. The fingerprint is
//     the method, the escaped path, the raw query, the headers named in
//     Options.FingerprintHeaders and the SHA-256 of the body.
//   - whose key is held by a request still running gets 409 at once, with
//     Retry-After: the seconds left on the running request's lease when
//     the store's error says when it ends, else Options.Lease, which the
//     remaining lease never exceeds.
//   - whose key has a stored response gets it back: the stored status, the
//     body byte for byte and the headers of the replay allowlist
//     (Content-Type, Content-Encoding, Location, ETag and
//     Options.ReplayHeaders; Set-Cookie only if listed there), plus
//     "Idempotent-Replayed: true". The handler does not run. A header is
//     stored as net/http sent it to the first client (a newline in a
//     value built from user input became a space; a value with a NUL
//     byte is left out), so every replay sends the first answer again.
//
// Every error answer above is an RFC 9457 problem (application/problem+json)
// whose "type" is one of the Problem... constants.
//
// # Running the handler
//
// The first request of a key runs the handler under an oncekv Claim held
// for Options.Lease and extended every Options.Heartbeat while the handler
// runs, so a slow handler keeps its key and a dead process frees it when the
// lease ends. Inside the handler, Key(r) is a stable id of (scope, key) to
// pass to external systems as their idempotency key (it stays the same on
// every retry and after a takeover), and Token(r) is the claim's fencing
// token, new at every takeover, for them to fence a late zombie. Never use
// the token as the idempotency key: a retry after a crash carries a new one.
//
// Stage(r, fn) queues a write to the store's user buckets that commits in
// the same transaction as the stored response: the order row and "this key
// was answered 201" are one commit, and a crash leaves both or neither.
//
// # What is stored (the policy the draft asks servers to publish)
//
//   - A response whose status is 2xx, 3xx or 4xx is stored (a client error
//     is the answer to that request) together with the staged writes, and
//     only then sent: the client sees a response only once it is durable.
//     Options.Store changes which statuses are stored.
//   - A 5xx response is sent as it is written and not stored; its staged
//     writes are dropped and the key is released at once, so the retry
//     runs the handler again.
//   - A handler that panics (runtime.Goexit included), or whose client went
//     away before it returned (the request's context is done), stores
//     nothing: its staged writes are dropped, the key is released, and a
//     retry runs the handler again. The client that went away got nothing.
//   - A staged write that fails stores nothing: the key is released and the
//     client gets 500, so a retry runs the handler again. (A staged error
//     never records a permanent failure, even wrapped with
//     oncekv.Permanent.)
//   - Responses are buffered until the commit, up to Options.MaxRecordBytes
//     of body (1 MiB by default). A handler that calls Flush, or writes more
//     than that, has its response streamed to the client from then on: it
//     is still stored at the end (the body too, unless it passed the cap),
//     but the client saw it before the commit. If that commit fails, the
//     connection is aborted (http.ErrAbortHandler) so the client sees a
//     broken response rather than a clean one, and the key is released.
//   - A stored body over Options.MaxRecordBytes is left out: the record
//     keeps the status and the allowlisted headers, and a replay answers
//     them with an empty body and "Idempotent-Replay-Body-Omitted: true".
//     The handler's work is still done once.
//   - 1xx informational responses (103 Early Hints) are passed on as the
//     handler writes them and never stored; trailers go to the first
//     client only and are not stored either.
//
// # Refusals that are not stored
//
// A 4xx is stored: it is the answer to that request, and a retry gets it
// again. A handler that refuses a request before any effect (its body
// fails validation) calls DoNotStore(r) instead: the answer is sent, not
// stored, and the key is forgotten, so the client's corrected request runs
// under the same key. This matters to an outbox: a relay (package relay)
// that gets a stored 4xx dead-letters the message, and its redrive sends
// the same key, which gets the stored 4xx again, replayed; a refusal that
// was not stored lets the redrive, once the cause is fixed, through.
//
// # Finding a record
//
// A record is the oncekv mark of (Options.Handler, RecordKey(scope, key)):
// the key is the hex of the first 16 bytes of the SHA-256 of the scope, a
// slash, and the Idempotency-Key as the client sent it. Lookup (or
// Middleware.Lookup) finds it from what the client sent and decodes it
// (ParseRecord): status, replayed headers, body; "oncekv http PATH SCOPE
// KEY" does the same from outside, and the admin handler (package admin)
// for a running process.
//
// # How long a key is remembered
//
// A stored response is replayed for as long as the store keeps the key's
// mark: at least the store's retention window (oncekv.Options.Retention,
// 7 days by default) after the key was first seen. A retry after that runs
// the handler again. A key in progress is held until its lease ends; after
// a crash, that is at most Options.Lease after the last heartbeat.
package idemhttp
