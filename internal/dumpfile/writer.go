package dumpfile

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
)

// Writer writes the lines of a dump, buffered: call Flush at the end.
type Writer struct {
	w   *bufio.Writer
	enc *json.Encoder
}

// NewWriter returns a Writer to w.
func NewWriter(w io.Writer) *Writer {
	bw := bufio.NewWriter(w)
	return &Writer{w: bw, enc: json.NewEncoder(bw)}
}

// kvWire is a TypeBucket or TypeKV line as written.
type kvWire struct {
	Type     string `json:"type"`
	Bucket   Text   `json:"bucket"`
	Key      *Text  `json:"key,omitempty"`
	Value    *Text  `json:"value,omitempty"`
	Fence    uint64 `json:"fence,omitempty"`
	Version  uint64 `json:"version,omitempty"`
	Sequence uint64 `json:"sequence,omitempty"`
	Decoded  any    `json:"decoded,omitempty"`
}

// counterWire is a TypeCounter line as written.
type counterWire struct {
	Type     string `json:"type"`
	Resource *Text  `json:"resource,omitempty"`
	Last     uint64 `json:"last"`
}

// markWire is a TypeMark line as written.
type markWire struct {
	Mark
	Decoded any `json:"decoded,omitempty"`
}

// Write writes l as one line. Errors: ErrUnknownType for a Type this
// package does not know; w's.
func (w *Writer) Write(l *Line) error {
	var v any
	switch l.Type {
	case TypeMark:
		m := MarkOf(l.Mark)
		m.Type = TypeMark
		v = markWire{Mark: m, Decoded: l.Decoded}
	case TypeBucket:
		v = kvWire{Type: l.Type, Bucket: l.Bucket, Sequence: l.Sequence, Decoded: l.Decoded}
	case TypeKV, TypeFence:
		v = kvWire{Type: l.Type, Bucket: l.Bucket, Key: textPtr(l.Key), Value: textPtr(l.Value),
			Fence: l.Fence, Version: l.Version, Decoded: l.Decoded}
	case TypeCounter:
		c := counterWire{Type: l.Type, Last: l.Last}
		if l.Resource != "" {
			c.Resource = textPtr([]byte(l.Resource))
		}
		v = c
	default:
		return fmt.Errorf("%w %q", ErrUnknownType, l.Type)
	}
	return w.enc.Encode(v)
}

// Flush writes what is buffered.
func (w *Writer) Flush() error { return w.w.Flush() }
