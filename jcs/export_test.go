package jcs

// FormatNumber is appendNumber for the tests: f as ECMAScript writes it.
func FormatNumber(f float64) string { return string(appendNumber(nil, f)) }
