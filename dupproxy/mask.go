package dupproxy

import (
	"fmt"
	"strconv"
	"strings"
)

// masked replaces the value of a masked field in both answers.
const masked = "<masked>"

// step is one step of a mask's JSON path.
type step struct {
	kind  stepKind
	name  string // stepField
	index int    // stepIndex
}

type stepKind uint8

const (
	stepField     stepKind = iota // .name or ['name']
	stepAnyField                  // .*
	stepIndex                     // [3]
	stepAnyIndex                  // [*]
	stepRecursive                 // ..name: the field at any depth
)

// mask is a parsed JSON path of Options.Mask.
type mask struct {
	path  string
	steps []step
}

// parseMask parses a JSON path: "$" then steps ".name", "['name']",
// ".*", "[N]", "[*]" and "..name". The "$" may be left out.
func parseMask(path string) (mask, error) {
	m := mask{path: path}
	s := strings.TrimPrefix(path, "$")
	if s == "" {
		return m, fmt.Errorf("%w: Mask %q: the whole body cannot be masked", ErrInvalidOptions, path)
	}
	if s[0] != '.' && s[0] != '[' {
		s = "." + s // "a.b" is "$.a.b"
	}
	for s != "" {
		var st step
		switch {
		case strings.HasPrefix(s, ".."):
			name, rest := cutName(s[2:])
			if name == "" {
				return m, fmt.Errorf("%w: Mask %q: \"..\" needs a field name after it", ErrInvalidOptions, path)
			}
			st, s = step{kind: stepRecursive, name: name}, rest
		case strings.HasPrefix(s, ".*"):
			st, s = step{kind: stepAnyField}, s[2:]
		case s[0] == '.':
			name, rest := cutName(s[1:])
			if name == "" {
				return m, fmt.Errorf("%w: Mask %q: \".\" needs a field name after it", ErrInvalidOptions, path)
			}
			st, s = step{kind: stepField, name: name}, rest
		case strings.HasPrefix(s, "['"):
			end := strings.Index(s, "']")
			if end < 0 {
				return m, fmt.Errorf("%w: Mask %q: ['name'] is not closed", ErrInvalidOptions, path)
			}
			st, s = step{kind: stepField, name: s[2:end]}, s[end+2:]
		case s[0] == '[':
			end := strings.IndexByte(s, ']')
			if end < 0 {
				return m, fmt.Errorf("%w: Mask %q: [ is not closed", ErrInvalidOptions, path)
			}
			if in := s[1:end]; in == "*" {
				st = step{kind: stepAnyIndex}
			} else if n, err := strconv.Atoi(in); err == nil && n >= 0 {
				st = step{kind: stepIndex, index: n}
			} else {
				return m, fmt.Errorf("%w: Mask %q: [%s] is not an index or *", ErrInvalidOptions, path, in)
			}
			s = s[end+1:]
		default:
			return m, fmt.Errorf("%w: Mask %q: unexpected %q", ErrInvalidOptions, path, s)
		}
		m.steps = append(m.steps, st)
	}
	return m, nil
}

// cutName splits a field name off the start of s: up to the next '.' or '['.
func cutName(s string) (name, rest string) {
	i := strings.IndexAny(s, ".[")
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i:]
}

// apply returns v (decoded JSON: maps, slices, json.Number, strings,
// bools, nil) with every value the mask matches replaced by masked. It
// changes v in place.
func (m *mask) apply(v any) any { return applySteps(v, m.steps) }

func applySteps(v any, steps []step) any {
	if len(steps) == 0 {
		return masked
	}
	st, rest := steps[0], steps[1:]
	switch st.kind {
	case stepField:
		if obj, ok := v.(map[string]any); ok {
			if child, ok := obj[st.name]; ok {
				obj[st.name] = applySteps(child, rest)
			}
		}
	case stepAnyField:
		if obj, ok := v.(map[string]any); ok {
			for k, child := range obj {
				obj[k] = applySteps(child, rest)
			}
		}
	case stepIndex:
		if arr, ok := v.([]any); ok && st.index < len(arr) {
			arr[st.index] = applySteps(arr[st.index], rest)
		}
	case stepAnyIndex:
		if arr, ok := v.([]any); ok {
			for i, child := range arr {
				arr[i] = applySteps(child, rest)
			}
		}
	case stepRecursive:
		return applyRecursive(v, st.name, rest)
	}
	return v
}

// applyRecursive applies rest to the field name of v and of every object
// under v.
func applyRecursive(v any, name string, rest []step) any {
	switch x := v.(type) {
	case map[string]any:
		for k, child := range x {
			if k == name {
				x[k] = applySteps(child, rest)
			} else {
				x[k] = applyRecursive(child, name, rest)
			}
		}
	case []any:
		for i, child := range x {
			x[i] = applyRecursive(child, name, rest)
		}
	}
	return v
}
