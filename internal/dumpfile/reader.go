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
	Bucket   *Text  `json:"bucket"`
	Value    *Text  `json:"value"`
	Fence    uint64 `json:"fence"`
	Version  uint64 `json:"version"`
	Sequence uint64 `json:"sequence"`
	Resource *Text  `json:"resource"`
	Last     uint64 `json:"last"`
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
	case TypeBucket, TypeKV, TypeFence:
		if w.Bucket == nil || len(*w.Bucket) == 0 {
			return nil, fmt.Errorf("%w: a %s line needs a bucket", ErrInvalidLine, w.Type)
		}
		l.Bucket, l.Sequence = *w.Bucket, w.Sequence
		if w.Type == TypeBucket {
			break
		}
		switch {
		case len(w.Key) == 0:
			return nil, fmt.Errorf("%w: a %s line needs a key", ErrInvalidLine, w.Type)
		case w.Type == TypeKV && w.Value == nil:
			return nil, fmt.Errorf("%w: a kv line needs a key and a value", ErrInvalidLine)
		case w.Type == TypeFence && w.Fence == 0 && w.Version == 0:
			return nil, fmt.Errorf("%w: a fence line needs a fence or a version", ErrInvalidLine)
		}
		l.Key, l.Fence, l.Version = w.Key, w.Fence, w.Version
		if w.Value != nil {
			l.Value = *w.Value
		}
	case TypeCounter:
		if w.Resource != nil {
			if len(*w.Resource) == 0 {
				return nil, fmt.Errorf("%w: a counter's resource is empty (leave it out for the claim tokens)", ErrInvalidLine)
			}
			l.Resource = string(*w.Resource)
		}
		l.Last = w.Last
	default:
		return nil, fmt.Errorf("%w %q", ErrUnknownType, w.Type)
	}
	return l, nil
}
