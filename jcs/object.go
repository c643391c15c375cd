package jcs

import (
	"bytes"
	"slices"
	"sort"
)

// An object is written to p.buf as it is read, its members in input
// order; when they are not in canonical order, emit writes them sorted.
// Rewriting each object in place as it closes would cost less to
// describe, but copy an object's contents again at every level above it:
// quadratic in the depth, a cost an attacker chooses.

// object is an object of the input whose members, or those of an object
// inside it, are not in canonical order. Offsets are 32 bits (MaxSize),
// to halve what an input of many small objects costs.
type object struct {
	start, end int32 // in p.buf, braces included
	// members: its members in canonical order, p.sorted[first:last].
	first, last int32
	// next is the index in p.objects of the first object after it that
	// is not inside it.
	next int32
}

// member is an object member, "name":value, written to p.buf[start:end].
type member struct {
	start, end int32
	keyEnd     int32 // the canonical "name" is p.buf[start:keyEnd]
	offset     int32 // of the name in the input
}

// name returns m's name in canonical form, without its quotes.
func (p *parser) name(m member) []byte { return p.buf[m.start+1 : m.keyEnd-1] }

func (p *parser) object() *fault {
	at := len(p.objects)
	p.objects = append(roomFor(p.objects, 1), object{start: int32(len(p.buf))})
	base := len(p.members)
	defer func() { p.members = p.members[:base] }()
	empty, f := p.open('}')
	if f != nil {
		return f
	}
	if !empty {
		defer func() { p.depth-- }()
	}
	for !empty {
		if p.pos >= len(p.data) {
			return faultf(ErrSyntax, p.pos, "the input ends where a member name should be")
		}
		if p.data[p.pos] != '"' {
			return faultf(ErrSyntax, p.pos, "%s where a member name should be", quoteRune(p.data[p.pos:]))
		}
		m := member{start: int32(len(p.buf)), offset: int32(p.pos)}
		if f := p.str(); f != nil {
			return f
		}
		m.keyEnd = int32(len(p.buf))
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return p.inMember(faultf(ErrSyntax, p.pos, "%s where ':' should follow a member name", quoteRune(p.data[p.pos:])), m)
		}
		p.pos++
		p.buf = append(p.buf, ':')
		p.space()
		if f := p.value(); f != nil {
			return p.inMember(f, m)
		}
		m.end = int32(len(p.buf))
		p.members = append(roomFor(p.members, 1), m)
		if empty, f = p.after('}', "object"); f != nil {
			return f
		}
	}
	ms := p.members[base:]
	sorted, f := p.sortMembers(ms)
	if f != nil {
		return f
	}
	if sorted && len(p.objects) == at+1 {
		// In order, and so is all it holds: its bytes are final, and
		// emit copies them as they are.
		p.objects = p.objects[:at]
		return nil
	}
	o := &p.objects[at]
	o.end, o.next = int32(len(p.buf)), int32(len(p.objects))
	o.first = int32(len(p.sorted))
	p.sorted = append(roomFor(p.sorted, len(ms)), ms...)
	o.last = int32(len(p.sorted))
	return nil
}

// inMember adds member m's name to f's path.
func (p *parser) inMember(f *fault, m member) *fault {
	f.segs = append(f.segs, nameSeg(decodeName(p.name(m))))
	return f
}

// sortMembers puts the members ms of one object in canonical order,
// refusing a name given twice (the canonical form of a name is one to
// one, so equal names are equal bytes). It reports whether they were in
// order already.
func (p *parser) sortMembers(ms []member) (sorted bool, f *fault) {
	cmp := func(a, b member) int { return compareNames(p.name(a), p.name(b)) }
	sorted = true
	for i := 1; i < len(ms) && sorted; i++ {
		sorted = cmp(ms[i-1], ms[i]) < 0 // not for equal names: the duplicate is found below
	}
	if sorted {
		return true, nil
	}
	p.reordered = true
	slices.SortStableFunc(ms, cmp)
	for i := 1; i < len(ms); i++ {
		if bytes.Equal(p.name(ms[i-1]), p.name(ms[i])) {
			first, again := ms[i-1], ms[i] // the sort is stable: first came first
			name := decodeName(p.name(again))
			f := faultf(ErrDuplicateName, int(again.offset), "the name %s again (first at offset %d)", quoteDetail(name), first.offset)
			f.segs = append(f.segs, nameSeg(name))
			return false, f
		}
	}
	return false, nil
}

// emit appends p.buf[start:end] to p.out, the objects in it, which are
// among p.objects[first:last], written with their members in canonical
// order.
func (p *parser) emit(start, end, first, last int32) {
	// p.objects are in input order: those in the range follow one
	// another from the first that starts in it, each one's own inside it.
	i := first + int32(sort.Search(int(last-first), func(k int) bool { return p.objects[first+int32(k)].start >= start }))
	for i < last && p.objects[i].start < end {
		o := p.objects[i]
		p.out = append(p.out, p.buf[start:o.start]...)
		p.out = append(p.out, '{')
		for j, m := range p.sorted[o.first:o.last] {
			if j > 0 {
				p.out = append(p.out, ',')
			}
			p.emit(m.start, m.end, i+1, o.next)
		}
		p.out = append(p.out, '}')
		start, i = o.end, o.next
	}
	p.out = append(p.out, p.buf[start:end]...)
}

// roomFor returns s with room for n more, doubling its capacity when it
// must grow: append grows large slices by a quarter, which for a large
// input allocates about five times what it keeps.
func roomFor[T any](s []T, n int) []T {
	if len(s)+n <= cap(s) {
		return s
	}
	return slices.Grow(s, max(len(s), n, 16))
}
