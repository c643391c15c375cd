package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestZZProbe(t *testing.T) {
	path := fixture(t)
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, nil, 0o600)
	for _, args := range [][]string{
		{"mark", path, "pay", "nope", "-json"},
		{"mark", path, "pay", "order-1", "-json"},
		{"mark", path, "", ""},
		{"marks", path, "-limit", "-1"},
		{"marks", path, "-state", "BOGUS"},
		{"marks", path, "-window", "xyz"},
		{"claims", path, "-json"},
		{"release", path, "pay", "order-1"},
		{"release", path, "email", "receipt-9", "-now", at(0)},
		{"stats", empty},
		{"check", empty},
		{"stats", "/nonexistent"},
		{"expire", path, "-dry-run", "-retention", "-1h"},
		{"expire", path, "-dry-run", "-retention", "0"},
		{"compact", path, path},
		{"compact", path, filepath.Join(t.TempDir(), "c.db")},
		{"forget", path, "pay", "nope"},
		{"stats", path, "-now", "garbage"},
	} {
		r := cli(t, args...)
		fmt.Printf("=== %v\ncode=%d\nstdout=%s\nstderr=%s\n", args[0:1], r.code, r.stdout, r.stderr)
		fmt.Println(args[2:])
	}
}
