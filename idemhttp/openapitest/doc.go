// Package openapitest checks idemhttp's OpenAPI fragment
// (idemhttp.Middleware.OpenAPI) with a maintained OpenAPI library,
// kin-openapi: the fragment, merged into a whole OpenAPI 3.1 document,
// loads and validates, and real answers of the middleware (a 409 with
// Retry-After, a 422, the 400s, 401, 413, 503, a stored 201 and its
// replay) validate against it. It is a module of its own so that the
// library stays out of the core's go.mod; it has tests only.
package openapitest
