package dumpfile

import (
	"errors"
	"fmt"

	"github.com/oncekv/oncekv"
)

// The types of line.
const (
	TypeMark   = "mark"   // a dedup mark: Line.Mark
	TypeBucket = "bucket" // a user bucket: Line.Bucket
	TypeKV     = "kv"     // a key of a user bucket: Line.Bucket, Key, Value, Fence, Version
	// TypeFence is the fence and version of a key without a value (a
	// deleted key, a key of a deleted bucket): Line.Bucket, Key, Fence,
	// Version.
	TypeFence = "fence"
	// TypeCounter is a token counter: Line.Resource (empty for the claim
	// tokens) and Last.
	TypeCounter = "counter"
)

// Line is one record of a dump. Which fields mean something depends on
// Type; the others are zero.
type Line struct {
	Type string
	// Mark is the mark of a TypeMark line.
	Mark oncekv.MarkInfo
	// Bucket is the user bucket of a TypeBucket or TypeKV line.
	Bucket []byte
	// Key and Value are the key and value of a TypeKV line, Key the key
	// of a TypeFence line.
	Key, Value []byte
	// Fence and Version are the key's, of a TypeKV or TypeFence line;
	// zero when it has none.
	Fence, Version uint64
	// Sequence is the bucket's NextSequence counter, of a TypeBucket line.
	Sequence uint64
	// Resource and Last are the counter's, of a TypeCounter line.
	Resource string
	Last     uint64
	// Decoded is a reading of the line's bytes for a person (a queue's
	// message, an HTTP record), written as the line's "decoded" member
	// when not nil. Reader leaves it nil.
	Decoded any
}

// Errors of a Reader, each inside a *LineError.
var (
	// ErrSyntax: a line is not one JSON object (or has bytes after it).
	ErrSyntax = errors.New("oncekv: dump: not a JSON object")
	// ErrUnknownType: a line's type is none of the Type constants.
	ErrUnknownType = errors.New("oncekv: dump: unknown line type")
	// ErrInvalidLine: a line of a known type lacks a member it needs, or
	// holds a value that cannot be.
	ErrInvalidLine = errors.New("oncekv: dump: invalid line")
)

// LineError is a bad line of a dump: its number (from 1) and what is wrong
// with it.
type LineError struct {
	Line int
	Err  error
}

// Error implements error.
func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

// Unwrap returns the cause.
func (e *LineError) Unwrap() error { return e.Err }
