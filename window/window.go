// Package window maps time to the fixed-width windows that dedup marks are
// grouped in, and decides when a window has outlived the dedup retention.
//
// A mark lives in the window of the time its key was first seen. Windows are
// aligned to multiples of Span since the Unix epoch, so the same instant maps
// to the same window in every process, and a window is dropped whole once
// even its newest possible mark is older than Retention. Dropping whole
// windows is what keeps expiry's cost independent of the number of live keys.
//
// The root package places its marks with it, from Options.Retention and
// Options.WindowSpan, and re-exports its defaults as oncekv.DefaultRetention
// and oncekv.DefaultWindowSpan.
package window

import (
	"errors"
	"fmt"
	"time"
)

// Defaults for Config's fields.
const (
	DefaultSpan      = time.Hour
	DefaultRetention = 7 * 24 * time.Hour
)

// ErrInvalidConfig reports a Config that cannot work.
var ErrInvalidConfig = errors.New("oncekv: invalid window configuration")

// Config says how wide a window is and how long marks are kept.
type Config struct {
	// Span is the width of one window. Narrower windows make expiry more
	// precise at the cost of more windows to look in.
	Span time.Duration
	// Retention is the dedup window: a key is deduplicated for at least this
	// long after it was first seen.
	Retention time.Duration
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []error
	if c.Span <= 0 {
		errs = append(errs, fmt.Errorf("%w: span %v must be positive", ErrInvalidConfig, c.Span))
	}
	if c.Retention < c.Span {
		errs = append(errs, fmt.Errorf("%w: retention %v must be at least the span %v", ErrInvalidConfig, c.Retention, c.Span))
	}
	return errors.Join(errs...)
}

// Start returns the start, in Unix nanoseconds, of the window holding t.
func (c Config) Start(t time.Time) int64 { return c.startOf(t.UnixNano()) }

func (c Config) startOf(n int64) int64 {
	span := int64(c.Span)
	start := n - n%span
	if n < 0 && n%span != 0 {
		start -= span // floor, not truncation, for instants before 1970
	}
	return start
}

// End returns the end (exclusive), in Unix nanoseconds, of the window that
// starts at start.
func (c Config) End(start int64) int64 { return start + int64(c.Span) }

// ExpiresAt returns when, in Unix nanoseconds, the window starting at start
// may be dropped by Retention alone: every mark in it was then first seen
// at least Retention ago. (A claim's lease can keep it longer.)
func (c Config) ExpiresAt(start int64) int64 { return c.End(start) + int64(c.Retention) }

// Expired reports whether the window starting at start may be dropped at
// now by Retention alone.
func (c Config) Expired(start int64, now time.Time) bool {
	return now.UnixNano() >= c.ExpiresAt(start)
}
