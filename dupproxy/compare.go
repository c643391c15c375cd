package dupproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/oncekv/oncekv/internal/textclip"
)

// answer is what one request got, as far as the comparison goes.
type answer struct {
	status int
	header http.Header
	body   []byte
	over   bool  // the body was longer than MaxBody: not compared
	err    error // the request did not get an answer from the upstream
}

// maxShown bounds a value quoted in a difference.
const maxShown = 80

// compare returns how the copy's answer b differs from the original's a,
// or "" when it does not: the status, then the headers named, then the
// body (as JSON with masks when both bodies are JSON). Bodies over
// MaxBody are not compared.
func compare(a, b *answer, headers []string, masks []mask) string {
	if a.status != b.status {
		return fmt.Sprintf("status %d vs %d", a.status, b.status)
	}
	for _, h := range headers {
		x, y := strings.Join(a.header.Values(h), ", "), strings.Join(b.header.Values(h), ", ")
		if x != y {
			return fmt.Sprintf("header %s: %s vs %s", http.CanonicalHeaderKey(h), quote(x), quote(y))
		}
	}
	if a.over || b.over {
		return ""
	}
	if x, y, ok := decodeBoth(a.body, b.body); ok {
		for i := range masks {
			x, y = masks[i].apply(x), masks[i].apply(y)
		}
		if d := firstDifference("$", x, y); d != "" {
			return "body " + d
		}
		return ""
	}
	if !bytes.Equal(a.body, b.body) {
		return fmt.Sprintf("body %s vs %s", quote(string(a.body)), quote(string(b.body)))
	}
	return ""
}

// decodeBoth decodes two JSON bodies, numbers kept as they are written.
func decodeBoth(a, b []byte) (x, y any, ok bool) {
	if !json.Valid(a) || !json.Valid(b) {
		return nil, nil, false
	}
	return decode(a), decode(b), true
}

func decode(b []byte) any {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	_ = d.Decode(&v) // valid, checked
	return v
}

// firstDifference returns where x and y (decoded JSON) first differ, in
// key order, as "$.path: x vs y"; "" when they are equal.
func firstDifference(path string, x, y any) string {
	switch a := x.(type) {
	case map[string]any:
		b, ok := y.(map[string]any)
		if !ok {
			break
		}
		keys := make([]string, 0, len(a)+len(b))
		for k := range a {
			keys = append(keys, k)
		}
		for k := range b {
			if _, ok := a[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			av, aok := a[k]
			bv, bok := b[k]
			switch {
			case !aok:
				return fmt.Sprintf("%s.%s: absent vs %s", path, k, show(bv))
			case !bok:
				return fmt.Sprintf("%s.%s: %s vs absent", path, k, show(av))
			}
			if d := firstDifference(path+"."+k, av, bv); d != "" {
				return d
			}
		}
		return ""
	case []any:
		b, ok := y.([]any)
		if !ok {
			break
		}
		for i := range min(len(a), len(b)) {
			if d := firstDifference(fmt.Sprintf("%s[%d]", path, i), a[i], b[i]); d != "" {
				return d
			}
		}
		if len(a) != len(b) {
			return fmt.Sprintf("%s: %d items vs %d", path, len(a), len(b))
		}
		return ""
	default:
		if x == y { // json.Number, string, bool, nil: comparable
			return ""
		}
	}
	return fmt.Sprintf("%s: %s vs %s", path, show(x), show(y))
}

// show prints a decoded JSON value, shortened.
func show(v any) string {
	var b strings.Builder
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return clip(strings.TrimSuffix(b.String(), "\n"))
}

// quote prints a header value or a body, shortened.
func quote(s string) string { return clip(fmt.Sprintf("%q", s)) }

func clip(s string) string { return textclip.Clip(s, maxShown) }
