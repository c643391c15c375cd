// Package textclip shortens text shown in failures and reports, so that a
// long value cannot flood them.
package textclip

import (
	"strconv"
	"unicode/utf8"
)

// Clip returns s if it is at most max bytes long, else its first max
// bytes or fewer (cut on a rune boundary) and "...(N bytes)", N being
// len(s).
func Clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "...(" + strconv.Itoa(len(s)) + " bytes)"
}
