package jcs

import (
	"bytes"
	"slices"
	"sync"
)

// Canonicalize returns the canonical form of the JSON text data, as RFC
// 8785 (the JSON Canonicalization Scheme) defines it: no whitespace,
// object members sorted by the UTF-16 code units of their names, numbers
// written as ECMAScript writes them (1.0 and 1e0 both as 1), strings with
// only '"', '\' and control characters escaped. Two texts that hold the
// same JSON value, read the way ECMAScript reads it, have the same
// canonical form; the canonical form of a canonical form is itself.
//
// data may be any JSON value, an object, an array or a scalar, with
// whitespace around it; it is read, never changed or kept. The work is
// linear in its length (n log n to sort an object of n members) whatever
// its shape, and memory at most 24 bytes per byte of it, 3 when its
// objects are in order already.
//
// Input the RFC does not cover is refused with an *Error wrapping one of
// ErrSyntax, ErrInvalidUTF8, ErrLoneSurrogate, ErrDuplicateName,
// ErrNumberRange, ErrTooDeep or ErrTooLarge, saying where in data it was
// found.
func Canonicalize(data []byte) ([]byte, error) {
	return canonicalize(data, bytes.Clone)
}

// canonicalize parses data and returns what use makes of its canonical
// form, which is valid only while use runs.
func canonicalize[T any](data []byte, use func(canonical []byte) T) (T, error) {
	p := newParser(data)
	defer p.free()
	out, err := p.canonical()
	if err != nil {
		var zero T
		return zero, err
	}
	return use(out), nil
}

// parser is one Canonicalize call. It reads data once, writing to buf
// the canonical form with each object's members in input order, and
// records the objects whose members are out of order, or that hold such
// an object (object.go); then, if there are any, emit writes the
// canonical form to out from buf with their members sorted, copying each
// byte once however deeply the objects nest. Every buffer grows with the
// input only.
type parser struct {
	data  []byte
	pos   int
	depth int
	buf   []byte
	// members is a stack: an open object's members from its base up, the
	// objects it holds pushing theirs above and moving them to sorted
	// when they close.
	members   []member
	sorted    []member // the members of closed objects, each one's together, in order
	objects   []object // the objects out of order or holding one, in input order
	reordered bool     // some object's members are not in input order
	out       []byte
}

// parsers keeps the buffers of finished calls, which a 1 KiB body would
// otherwise allocate afresh each time.
var parsers = sync.Pool{New: func() any { return new(parser) }}

// maxPooled bounds the bytes a pooled parser keeps: one huge input must
// not pin its memory for good.
const maxPooled = 1 << 20

func newParser(data []byte) *parser {
	p := parsers.Get().(*parser)
	p.data, p.pos, p.depth, p.reordered = data, 0, 0, false
	p.buf, p.out = p.buf[:0], p.out[:0]
	p.members, p.sorted, p.objects = p.members[:0], p.sorted[:0], p.objects[:0]
	return p
}

func (p *parser) free() {
	const memberBytes, objectBytes = 16, 20
	if cap(p.buf)+cap(p.out)+memberBytes*(cap(p.members)+cap(p.sorted))+objectBytes*cap(p.objects) > maxPooled {
		return
	}
	p.data = nil
	parsers.Put(p)
}

// canonical parses the whole input and returns the canonical form, in
// p.out.
func (p *parser) canonical() ([]byte, error) {
	if len(p.data) > MaxSize {
		return nil, faultf(ErrTooLarge, 0, "%d bytes, over the limit of %d", len(p.data), MaxSize).public()
	}
	// The canonical form is about as long as the input: one allocation
	// where growing by appends would make several.
	p.buf = slices.Grow(p.buf, len(p.data))
	p.space()
	if p.pos == len(p.data) {
		return nil, faultf(ErrSyntax, p.pos, "no JSON value in the input").public()
	}
	if f := p.value(); f != nil {
		return nil, f.public()
	}
	p.space()
	if p.pos != len(p.data) {
		return nil, faultf(ErrSyntax, p.pos, "%s after the JSON value", quoteRune(p.data[p.pos:])).public()
	}
	if !p.reordered {
		return p.buf, nil
	}
	p.out = slices.Grow(p.out, len(p.buf)) // the same bytes, reordered
	p.emit(0, int32(len(p.buf)), 0, int32(len(p.objects)))
	return p.out, nil
}

// space skips JSON whitespace: space, tab, line feed, carriage return.
func (p *parser) space() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// value reads the value at p.pos (no whitespace before it).
func (p *parser) value() *fault {
	if p.pos >= len(p.data) {
		return faultf(ErrSyntax, p.pos, "the input ends where a value should be")
	}
	switch c := p.data[p.pos]; c {
	case '{':
		return p.object()
	case '[':
		return p.array()
	case '"':
		return p.str()
	case 't':
		return p.literal("true")
	case 'f':
		return p.literal("false")
	case 'n':
		return p.literal("null")
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return p.number()
		}
		return faultf(ErrSyntax, p.pos, "%s where a value should be", quoteRune(p.data[p.pos:]))
	}
}

func (p *parser) literal(word string) *fault {
	if !bytes.HasPrefix(p.data[p.pos:], []byte(word)) {
		return faultf(ErrSyntax, p.pos, "%s where a value should be", quoteDetail(p.data[p.pos:min(p.pos+len(word), len(p.data))]))
	}
	p.buf = append(p.buf, word...)
	p.pos += len(word)
	return nil
}

func (p *parser) array() *fault {
	if empty, f := p.open(']'); f != nil || empty {
		return f
	}
	defer func() { p.depth-- }()
	for i := 0; ; i++ {
		if f := p.value(); f != nil {
			f.segs = append(f.segs, indexSeg(i))
			return f
		}
		if done, f := p.after(']', "array"); f != nil || done {
			return f
		}
	}
}

// open enters the array or object at p.pos, refusing to nest past
// MaxDepth, and reads it whole if it is empty; else the caller reads its
// elements, then leaves it (p.depth--).
func (p *parser) open(closer byte) (empty bool, f *fault) {
	if p.depth == MaxDepth {
		return false, faultf(ErrTooDeep, p.pos, "more than %d arrays and objects inside one another", MaxDepth)
	}
	p.buf = append(p.buf, p.data[p.pos])
	p.pos++
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == closer {
		p.pos++
		p.buf = append(p.buf, closer)
		return true, nil
	}
	p.depth++
	return false, nil
}

// after reads what follows an element of an array or object (a member):
// a comma and the space after it, or closer, which ends it (done).
func (p *parser) after(closer byte, what string) (done bool, f *fault) {
	p.space()
	switch {
	case p.pos >= len(p.data):
		return false, faultf(ErrSyntax, p.pos, "the input ends inside an %s", what)
	case p.data[p.pos] == ',':
		p.pos++
		p.buf = append(p.buf, ',')
		p.space()
		return false, nil
	case p.data[p.pos] == closer:
		p.pos++
		p.buf = append(p.buf, closer)
		return true, nil
	}
	return false, faultf(ErrSyntax, p.pos, "%s where an %s needs ',' or '%c'", quoteRune(p.data[p.pos:]), what, closer)
}
