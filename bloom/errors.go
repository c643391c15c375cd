package bloom

import "errors"

// Errors returned by this package, wrapped with detail; test for them with
// errors.Is.
var (
	// ErrInvalidParameter is returned by New for a planned key count or
	// false-positive rate out of range.
	ErrInvalidParameter = errors.New("bloom: invalid parameter")

	// ErrCorrupt is returned by Decode and UnmarshalBinary when the
	// encoding is damaged: truncated, checksum mismatch, or fields that
	// are out of range or inconsistent with each other. The filter must be
	// rebuilt from the keys it summarized.
	ErrCorrupt = errors.New("bloom: corrupt filter encoding")

	// ErrUnsupported is returned by Decode and UnmarshalBinary for an
	// intact encoding this version cannot read: a newer format version or
	// an unknown hash algorithm. Like ErrCorrupt, it means rebuild.
	ErrUnsupported = errors.New("bloom: unsupported filter encoding")
)
