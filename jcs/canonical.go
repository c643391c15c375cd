package jcs

import (
	"bytes"
	"slices"
	"strconv"
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
// Input the RFC does not cover is refused with an *Error wrapping one of
// ErrSyntax, ErrInvalidUTF8, ErrLoneSurrogate, ErrDuplicateName,
// ErrNumberRange or ErrTooDeep, saying where in data it was found. data
// may be any JSON value, an object, an array or a scalar, with
// whitespace around it; it is read, never changed or kept.
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

// parser is one Canonicalize call: it reads data from pos and writes the
// canonical form to out as it goes; each object's members are written in
// the order they came, then sorted in place.
type parser struct {
	data  []byte
	pos   int
	out   []byte
	depth int
	// members is a stack: an object's members from its base up, the
	// objects it holds pushing theirs above and popping them before it
	// goes on. Its size is bounded by the input's.
	members []member
	names   []byte // the decoded names that had escapes, a stack as members
	scratch []byte // an object's members while they are sorted
}

// member is an object member written to out[start:end] ("name":value).
type member struct {
	name       span // decoded
	start, end int
	offset     int // of its name in data
}

// parsers keeps the buffers of finished calls, which a 1 KiB body would
// otherwise allocate afresh each time.
var parsers = sync.Pool{New: func() any { return new(parser) }}

// maxPooled bounds the buffers a pooled parser keeps: one huge input must
// not pin its memory for good.
const maxPooled = 64 << 10

func newParser(data []byte) *parser {
	p := parsers.Get().(*parser)
	p.data, p.pos, p.depth = data, 0, 0
	p.out, p.members, p.names, p.scratch = p.out[:0], p.members[:0], p.names[:0], p.scratch[:0]
	return p
}

func (p *parser) free() {
	if cap(p.out) > maxPooled || cap(p.scratch) > maxPooled || cap(p.names) > maxPooled || cap(p.members) > maxPooled/32 {
		return
	}
	p.data = nil
	parsers.Put(p)
}

// canonical parses the whole input and returns the canonical form, in
// p.out.
func (p *parser) canonical() ([]byte, error) {
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
		_, f := p.str(false)
		return f
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
	p.out = append(p.out, word...)
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
	p.out = append(p.out, p.data[p.pos])
	p.pos++
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == closer {
		p.pos++
		p.out = append(p.out, closer)
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
		p.out = append(p.out, ',')
		p.space()
		return false, nil
	case p.data[p.pos] == closer:
		p.pos++
		p.out = append(p.out, closer)
		return true, nil
	}
	return false, faultf(ErrSyntax, p.pos, "%s where an %s needs ',' or '%c'", quoteRune(p.data[p.pos:]), what, closer)
}

func (p *parser) object() *fault {
	open := len(p.out)
	if empty, f := p.open('}'); f != nil || empty {
		return f
	}
	defer func() { p.depth-- }()
	base, nbase := len(p.members), len(p.names)
	defer func() { p.members, p.names = p.members[:base], p.names[:nbase] }()
	for {
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			if p.pos >= len(p.data) {
				return faultf(ErrSyntax, p.pos, "the input ends where a member name should be")
			}
			return faultf(ErrSyntax, p.pos, "%s where a member name should be", quoteRune(p.data[p.pos:]))
		}
		m := member{start: len(p.out), offset: p.pos}
		name, f := p.str(true)
		if f != nil {
			return f
		}
		m.name = name
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			f := faultf(ErrSyntax, p.pos, "%s where ':' should follow a member name", quoteRune(p.data[p.pos:]))
			f.segs = append(f.segs, nameSeg(p.name(name)))
			return f
		}
		p.pos++
		p.out = append(p.out, ':')
		p.space()
		if f := p.value(); f != nil {
			f.segs = append(f.segs, nameSeg(p.name(name)))
			return f
		}
		m.end = len(p.out)
		p.members = append(p.members, m)
		done, f := p.after('}', "object")
		if f != nil {
			return f
		}
		if done {
			return p.sortMembers(open, p.members[base:])
		}
	}
}

// sortMembers rewrites the object written at p.out[open:] with its
// members ms in canonical order, refusing a name given twice.
func (p *parser) sortMembers(open int, ms []member) *fault {
	sorted := true
	for i := 1; i < len(ms); i++ {
		if c := compareNames(p.name(ms[i-1].name), p.name(ms[i].name)); c >= 0 {
			sorted = false
			break
		}
	}
	if sorted {
		return nil
	}
	slices.SortStableFunc(ms, func(a, b member) int { return compareNames(p.name(a.name), p.name(b.name)) })
	for i := 1; i < len(ms); i++ {
		if bytes.Equal(p.name(ms[i-1].name), p.name(ms[i].name)) {
			first, again := ms[i-1], ms[i] // the sort is stable: first came first
			f := faultf(ErrDuplicateName, again.offset, "the name %s again (first at offset %d)", quoteDetail(p.name(again.name)), first.offset)
			f.segs = append(f.segs, nameSeg(p.name(again.name)))
			return f
		}
	}
	p.scratch = append(p.scratch[:0], p.out[open:]...)
	p.out = append(p.out[:open], '{')
	for i, m := range ms {
		if i > 0 {
			p.out = append(p.out, ',')
		}
		p.out = append(p.out, p.scratch[m.start-open:m.end-open]...)
	}
	p.out = append(p.out, '}')
	return nil
}

// number reads the number at p.pos and writes it as ECMAScript would.
func (p *parser) number() *fault {
	start := p.pos
	if p.data[p.pos] == '-' {
		p.pos++
	}
	digits := func() int {
		n := 0
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	intStart := p.pos
	switch n := digits(); {
	case n == 0:
		return faultf(ErrSyntax, p.pos, "%s where a number needs a digit", quoteRune(p.data[p.pos:]))
	case n > 1 && p.data[intStart] == '0':
		return faultf(ErrSyntax, intStart, "a number with a leading zero")
	}
	integer := true
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return faultf(ErrSyntax, p.pos, "%s where a fraction needs a digit", quoteRune(p.data[p.pos:]))
		}
		integer = false
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return faultf(ErrSyntax, p.pos, "%s where an exponent needs a digit", quoteRune(p.data[p.pos:]))
		}
		integer = false
	}
	lit := p.data[start:p.pos]
	// An integer of up to 15 digits is exact in a double and ECMAScript
	// writes it as is, -0 aside.
	if integer && p.pos-intStart <= 15 {
		if p.pos-intStart == 1 && p.data[intStart] == '0' {
			lit = p.data[intStart:p.pos]
		}
		p.out = append(p.out, lit...)
		return nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil { // the grammar is checked, so only a range error is left
		return faultf(ErrNumberRange, start, "%s is beyond the range of a double (about ±1.8e308)", quoteDetail(lit))
	}
	p.out = appendNumber(p.out, f)
	return nil
}
