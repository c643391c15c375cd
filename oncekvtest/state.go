package oncekvtest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/textclip"
)

// State is what a Snapshot saw: printable names (a bucket and key, a
// file) mapped to printable values. Two runs agree when their States are
// equal. Build one by hand, from Buckets and Files, or both.
type State map[string]string

// MaxStateEntries bounds the entries Buckets and Files read, so a runaway
// handler fails with an error instead of filling memory.
const MaxStateEntries = 100000

// ErrStateTooLarge is returned by Buckets and Files past MaxStateEntries.
var ErrStateTooLarge = fmt.Errorf("oncekvtest: state over %d entries", MaxStateEntries)

// Buckets reads the user buckets of db whose names keep accepts (nil:
// every one) through the public API: an entry "bucket/key" per key, its
// value printable (quoted text, else hex, with the number an 8-byte value
// holds big-endian), followed by " fence=N" when the key has a fence. A
// key's Version is left out: it counts writes, and the order of fenced
// writes changes how many succeed, not what they leave. Errors: the
// store's, ErrStateTooLarge.
func Buckets(db *oncekv.DB, keep func(bucket string) bool) (State, error) {
	st := State{}
	err := db.View(func(tx *oncekv.Tx) error {
		return tx.ForEachBucket(func(name []byte) error {
			if keep != nil && !keep(string(name)) {
				return nil
			}
			b := tx.Bucket(name)
			prefix := printName(name) + "/"
			return b.ForEach(func(k, v []byte) error {
				if len(st) >= MaxStateEntries {
					return ErrStateTooLarge
				}
				val := printValue(v)
				if f := b.Fence(k); f != 0 {
					val += " fence=" + strconv.FormatUint(f, 10)
				}
				st[prefix+printName(k)] = val
				return nil
			})
		})
	})
	return st, err
}

// Files reads every regular file under dir: an entry "file:path" (the
// path relative to dir, with slashes) per file, its content printable as
// in Buckets. A dir that does not exist is an empty State. Errors: the
// file system's, ErrStateTooLarge.
func Files(dir string) (State, error) {
	st := State{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		switch {
		case errors.Is(err, fs.ErrNotExist) && path == dir:
			return fs.SkipAll
		case err != nil:
			return err
		case !d.Type().IsRegular():
			return nil
		case len(st) >= MaxStateEntries:
			return ErrStateTooLarge
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		st["file:"+filepath.ToSlash(rel)] = printValue(b)
		return nil
	})
	return st, err
}

// printName shows a bucket name or key as it is when it is plain text
// without a slash, else quoted.
func printName(b []byte) string {
	plain := len(b) > 0 && utf8.Valid(b)
	for _, r := range string(b) {
		if !unicode.IsPrint(r) || r == '/' || r == ' ' || r == '"' {
			plain = false
			break
		}
	}
	if plain {
		return string(b)
	}
	if utf8.Valid(b) {
		return strconv.Quote(string(b))
	}
	return fmt.Sprintf("0x%x", b)
}

// printValue shows a value quoted when it is text, else in hex, with the
// number an 8-byte value holds big-endian (the usual balance encoding).
func printValue(b []byte) string {
	if utf8.Valid(b) && !strings.ContainsFunc(string(b), func(r rune) bool { return !unicode.IsPrint(r) && r != '\n' && r != '\t' }) {
		return strconv.Quote(string(b))
	}
	if len(b) == 8 {
		var n uint64
		for _, c := range b {
			n = n<<8 | uint64(c)
		}
		return fmt.Sprintf("0x%x (uint64 %d)", b, n)
	}
	return fmt.Sprintf("0x%x", b)
}

// difference is one entry two States disagree on.
type difference struct {
	name       string
	want, got  string
	onlyInWant bool
	onlyInGot  bool
}

// diff returns the entries want and got disagree on, by name.
func diff(want, got State) []difference {
	var ds []difference
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			ds = append(ds, difference{name: name, want: w, onlyInWant: true})
		case g != w:
			ds = append(ds, difference{name: name, want: w, got: g})
		}
	}
	for name, g := range got {
		if _, ok := want[name]; !ok {
			ds = append(ds, difference{name: name, got: g, onlyInGot: true})
		}
	}
	slices.SortFunc(ds, func(a, b difference) int { return strings.Compare(a.name, b.name) })
	return ds
}

// maxShownDifferences and maxShownValue bound what a failure prints.
const (
	maxShownDifferences = 20
	maxShownValue       = 160
)

// format prints the differences one a line, the reference's value
// first, at most maxShownDifferences of them.
func formatDiff(ds []difference, wantName, gotName string) string {
	var b strings.Builder
	for i, d := range ds {
		if i == maxShownDifferences {
			fmt.Fprintf(&b, "    ... and %d more\n", len(ds)-i)
			break
		}
		switch {
		case d.onlyInWant:
			fmt.Fprintf(&b, "    - %s: %s (only in the %s)\n", d.name, clip(d.want), wantName)
		case d.onlyInGot:
			fmt.Fprintf(&b, "    + %s: %s (only in the %s)\n", d.name, clip(d.got), gotName)
		default:
			fmt.Fprintf(&b, "    ~ %s: %s %s, %s %s\n", d.name, wantName, clip(d.want), gotName, clip(d.got))
		}
	}
	return b.String()
}

// clip shortens s to maxShownValue bytes.
func clip(s string) string { return textclip.Clip(s, maxShownValue) }
