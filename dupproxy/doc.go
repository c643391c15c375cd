// Package dupproxy is a reverse proxy for staging that sends a fraction of
// the requests it forwards twice, and reports the routes whose second
// answer differs from the first: the article's duplicate injection ("a
// proxy that sends 5% of the requests twice; in a week every
// non-idempotent path is found, before production").
//
// Every request goes to the upstream through net/http/httputil's
// ReverseProxy, which handles the hop-by-hop headers; what the client gets
// is the upstream's answer to its own request, byte for byte. For a
// fraction of the requests of the routes chosen, the proxy also sends a
// copy (same method, URL, headers and body, through the same
// ReverseProxy): right after the client has the answer (AfterAnswer), as
// soon as the original request has reached the upstream (Concurrent), or
// a while after the answer (Delayed); with the original's Idempotency-Key,
// without it (to find the routes that need one), or both. It then compares
// the two answers: the status, the response headers named, and the body,
// as JSON with the volatile fields masked by JSON path when both bodies
// are JSON, byte for byte otherwise.
//
// The report, per route and per kind of copy (with or without a key):
// copies sent, answers that differed, copies answered 5xx, 409s to
// concurrent copies (the answer an Idempotency-Key middleware gives while
// the first request runs: counted apart, and the copy is sent again once
// the original is answered), copies that failed to reach the upstream,
// and a few examples of each difference. It is a text table, JSON, and
// Prometheus metrics in the text exposition format.
//
// Memory is bounded: a request whose body is over Options.MaxBody is
// forwarded without a copy; answers are compared on at most MaxBody bytes
// each (a longer body is compared by status and headers only); at most
// MaxInFlight copies run at once (a request past that is not copied); the
// report keeps at most MaxRoutes routes and MaxExamples examples each.
//
// A copy is a real second request: against a route that is not
// idempotent it repeats the effect (a second charge in staging). That is
// what it is for; never point it at production.
package dupproxy
