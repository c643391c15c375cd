package delivery

// Clip bounds how much of a user's key (or another value of theirs) an
// error message repeats: the first 64 bytes, then "…".
func Clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
