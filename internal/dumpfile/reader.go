package dumpfile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Reader reads the lines of a dump, checking each.
type Reader struct {
	r    *bufio.Reader
	line int
}

// NewReader returns a Reader of r.
func NewReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReader(r)} }

// wire is any line as read: the union of every type's members.
type wire struct {
	Mark
	Bucket *Text `json:"bucket"`
	Value  *Text `json:"value"`
	// "decoded" is for a person: unknown members are ignored.
}

// Next returns the next line, or io.EOF after the last one. A bad line is
// a *LineError naming it, matching ErrSyntax, ErrUnknownType or
// ErrInvalidLine; an error of the underlying reader is returned as it is.
// A line holds as much memory as it is long.
func (r *Reader) Next() (*Line, error) {
	for {
		raw, err := r.r.ReadBytes('\n')
		if len(raw) == 0 && err != nil {
			return nil, err // io.EOF at the end
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		r.line++
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		l, perr := parse(raw)
		if perr != nil {
			return nil, &LineError{Line: r.line, Err: perr}
		}
		return l, nil
	}
}

// parse decodes and checks one line.
func parse(raw []byte) (*Line, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var w wire
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: more after the object", ErrSyntax)
	}
	l := &Line{Type: w.Type}
	switch w.Type {
	case TypeMark:
		m, err := w.MarkInfo()
		if err != nil {
			return nil, err
		}
		l.Mark = m
	case TypeBucket, TypeKV:
		if w.Bucket == nil || len(*w.Bucket) == 0 {
			return nil, fmt.Errorf("%w: a %s line needs a bucket", ErrInvalidLine, w.Type)
		}
		l.Bucket = *w.Bucket
		if w.Type == TypeBucket {
			break
		}
		if len(w.Key) == 0 || w.Value == nil {
			return nil, fmt.Errorf("%w: a kv line needs a key and a value", ErrInvalidLine)
		}
		l.Key, l.Value = w.Key, *w.Value
	default:
		return nil, fmt.Errorf("%w %q", ErrUnknownType, w.Type)
	}
	return l, nil
}
