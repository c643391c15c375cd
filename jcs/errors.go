package jcs

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// What can be wrong with an input, one sentinel per rule of RFC 8785 and
// I-JSON (RFC 7493) it breaks. Canonicalize returns them inside an *Error
// saying where; test them with errors.Is.
var (
	// ErrSyntax: the input is not JSON (RFC 8259): a stray or missing
	// character, an unterminated value, text after the value, or nothing.
	ErrSyntax = errors.New("oncekv: jcs: not JSON")
	// ErrInvalidUTF8: a string holds bytes that are not UTF-8 (I-JSON
	// requires it), raw surrogates and overlong forms included.
	ErrInvalidUTF8 = errors.New("oncekv: jcs: invalid UTF-8")
	// ErrLoneSurrogate: a \u escape names half of a UTF-16 surrogate pair
	// without the other half, which is no character at all (I-JSON).
	ErrLoneSurrogate = errors.New("oncekv: jcs: lone surrogate")
	// ErrDuplicateName: an object has two members of the same name, after
	// escapes are decoded (I-JSON).
	ErrDuplicateName = errors.New("oncekv: jcs: duplicate member name")
	// ErrNumberRange: a number's magnitude is beyond IEEE 754 double
	// precision, so it would read as Infinity (I-JSON; RFC 8785 3.2.2.3).
	// A number too small to tell from zero reads as 0, as ECMAScript's
	// JSON.parse reads it.
	ErrNumberRange = errors.New("oncekv: jcs: number out of range")
	// ErrTooDeep: arrays and objects are nested more than MaxDepth deep.
	ErrTooDeep = errors.New("oncekv: jcs: nested too deep")
	// ErrTooLarge: the input is longer than MaxSize.
	ErrTooLarge = errors.New("oncekv: jcs: input too large")
)

// Limits of the input.
const (
	// MaxDepth is how deeply arrays and objects may nest, as in
	// encoding/json: deeper input is refused with ErrTooDeep instead of
	// growing the stack.
	MaxDepth = 10000
	// MaxSize is the longest input, in bytes (2 GiB less one): offsets
	// are kept in 32 bits. Longer input is refused with ErrTooLarge.
	MaxSize = math.MaxInt32
)

// Error says why an input has no canonical form, and where: Err is one of
// the sentinels above, Offset the byte of the input where the fault was
// found, Path the value holding it.
type Error struct {
	// Err is ErrSyntax, ErrInvalidUTF8, ErrLoneSurrogate,
	// ErrDuplicateName, ErrNumberRange, ErrTooDeep or ErrTooLarge.
	Err error
	// Offset is the position in the input, in bytes from its start, of
	// the character at fault (for a duplicate, its second name).
	Offset int
	// Path is the value at fault as an RFC 9535 normalized path: "$" for
	// the whole input, $['items'][2] for the third element of member
	// "items".
	Path string
	// Detail says what was found there.
	Detail string
}

// Error returns "oncekv: jcs: <what> at <path> (offset <n>): <detail>".
func (e *Error) Error() string {
	return fmt.Sprintf("%v at %s (offset %d): %s", e.Err, e.Path, e.Offset, e.Detail)
}

// Unwrap returns Err, for errors.Is.
func (e *Error) Unwrap() error { return e.Err }

// Permanent reports true: the same input fails the same way every time,
// so oncekv.Classify (and package retry) say give up, not redeliver.
func (e *Error) Permanent() bool { return true }

// fault is an *Error on its way up the parser: each array or object it
// leaves adds its own path segment, so the path costs nothing unless an
// error happens.
type fault struct {
	err    error
	offset int
	detail string
	segs   []string // innermost first
}

func (f *fault) Error() string { return f.err.Error() }

// faultf returns a fault of kind err at offset.
func faultf(err error, offset int, format string, args ...any) *fault {
	return &fault{err: err, offset: offset, detail: fmt.Sprintf(format, args...)}
}

// public turns f into the *Error callers see.
func (f *fault) public() *Error {
	var b strings.Builder
	b.WriteByte('$')
	for i := len(f.segs) - 1; i >= 0; i-- {
		b.WriteString(f.segs[i])
	}
	return &Error{Err: f.err, Offset: f.offset, Path: b.String(), Detail: f.detail}
}

// indexSeg is the path segment of an array's element i.
func indexSeg(i int) string { return "[" + strconv.Itoa(i) + "]" }

// nameSeg is the path segment of an object's member name, a decoded
// string, quoted as RFC 9535 section 2.7 says a normalized path quotes it.
func nameSeg(name []byte) string {
	var b strings.Builder
	b.WriteString("['")
	for len(name) > 0 {
		r, size := utf8.DecodeRune(name)
		switch {
		case r == '\'':
			b.WriteString(`\'`)
		case r == '\\':
			b.WriteString(`\\`)
		case r < 0x20:
			b.WriteString(controlEscape(byte(r)))
		default:
			b.Write(name[:size])
		}
		name = name[size:]
	}
	b.WriteString("']")
	return b.String()
}

// quoteDetail quotes up to 64 bytes of s for an error's Detail, so that an
// error stays short whatever the input.
func quoteDetail(s []byte) string {
	const limit = 64
	if len(s) <= limit {
		return strconv.Quote(string(s))
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(string(s[:cut])) + "..."
}
