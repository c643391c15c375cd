// Package jcs computes the canonical form of JSON, as RFC 8785 (the JSON
// Canonicalization Scheme) defines it, and fingerprints of it for
// oncekv.Request.Fingerprint, so that a message re-serialised on its way
// (members in another order, 1.0 for 1, "\u00e9" for "é") is a duplicate
// of itself and not a reuse of its idempotency key. It uses the standard
// library only.
//
// Canonicalize returns the canonical bytes, Fingerprint their SHA-256 and
// Request an oncekv.Request carrying both body and fingerprint. A client
// in any language computes the same fingerprint with any RFC 8785
// implementation and SHA-256.
//
// The canonical form is defined for I-JSON (RFC 7493) only: strings of
// valid UTF-8 without lone surrogates, objects without duplicate names,
// numbers within the range of a double. Other input gets an *Error naming
// the rule it broke, the byte offset and the JSON path where it did; it is
// permanent, so oncekv.Classify says give up.
//
// What canonicalisation does not do: it keeps every value's type, so 1
// and "1" differ, and so do 1 and true, null and a missing member, [] and
// {}; it keeps array order; it does not normalise Unicode (é as one
// character or as e and a combining accent are different strings); and
// it reads numbers as doubles, as ECMAScript does, so integers beyond 2^53
// that round to the same double (9007199254740993 and 9007199254740992)
// get the same form. docs/fingerprints.md in the repository says when to
// use it.
package jcs
