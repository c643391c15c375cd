package main

import (
	"encoding/hex"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// printable renders bytes for a person: quoted when they are printable
// UTF-8, else as hex.
func printable(b []byte) string {
	if !utf8.Valid(b) {
		return "hex:" + hex.EncodeToString(b)
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) && !unicode.IsSpace(r) {
			return "hex:" + hex.EncodeToString(b)
		}
	}
	return strconv.Quote(string(b))
}
