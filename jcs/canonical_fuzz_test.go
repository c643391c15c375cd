package jcs_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/oncekv/oncekv/jcs"
)

// FuzzCanonicalize: whatever the input, Canonicalize does not panic, and
//   - when it succeeds, the input is JSON (encoding/json's Valid), the
//     output is its own canonical form (a fixed point), and encoding/json
//     reads the output as the same value as the input;
//   - when it fails, the error is an *Error at an offset within the input
//     with a path from "$", and ErrSyntax only for what encoding/json
//     refuses too.
func FuzzCanonicalize(f *testing.F) {
	inputs, _ := filepath.Glob(filepath.Join("testdata", "rfc8785", "input", "*.json"))
	for _, in := range inputs {
		if b, err := os.ReadFile(in); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{
		``, `0`, `-0.0`, `1e400`, `1e-400`, `9007199254740993`, `[1.0,1e0,"1"]`, `"\ud83d\ude00"`, `"\ud800"`,
		`{"a":1,"\u0061":2}`, `{"\ufffd":1,"😀":2}`, "\"\xed\xa0\x80\"", `{"a" : [ true , false , null ] }`,
		strings.Repeat("[", 64) + strings.Repeat("]", 64), `{"b":{"y":1,"x":2},"a":[{"d":0,"c":1}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		orig := bytes.Clone(data)
		out, err := jcs.Canonicalize(data)
		if !bytes.Equal(orig, data) {
			t.Fatalf("the input changed")
		}
		if err != nil {
			var e *jcs.Error
			if !errors.As(err, &e) {
				t.Fatalf("%T is not an *Error: %v", err, err)
			}
			if e.Offset < 0 || e.Offset > len(data) || !strings.HasPrefix(e.Path, "$") {
				t.Fatalf("a bad place in %q: %v", data, err)
			}
			if errors.Is(err, jcs.ErrSyntax) && json.Valid(data) {
				t.Fatalf("%q is JSON to encoding/json but not to jcs: %v", data, err)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("%q is not JSON to encoding/json, yet canonicalised to %q", data, out)
		}
		again, err := jcs.Canonicalize(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not a fixed point: %q -> %q -> %q, %v", data, out, again, err)
		}
		var in, canon any
		if err := json.Unmarshal(data, &in); err != nil {
			t.Fatalf("encoding/json: %v", err)
		}
		if err := json.Unmarshal(out, &canon); err != nil {
			t.Fatalf("encoding/json on the output %q: %v", out, err)
		}
		if !reflect.DeepEqual(in, canon) {
			t.Fatalf("%q and its canonical form %q read as other values: %#v, %#v", data, out, in, canon)
		}
	})
}
