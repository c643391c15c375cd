package oncekv

import (
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"os"
	"runtime"
	"time"

	"github.com/oncekv/oncekv/window"
)

// Defaults of Options' fields.
const (
	DefaultOpenTimeout  = 3 * time.Second
	DefaultFileMode     = os.FileMode(0o600)
	DefaultRetention    = window.DefaultRetention
	DefaultWindowSpan   = window.DefaultSpan
	DefaultMaxGroupSize = 1000

	DefaultBloomFalsePositiveRate = 0.01
	DefaultExpireInterval         = time.Minute
	DefaultExpireStep             = 10000
	DefaultMaxClockJump           = 24 * time.Hour

	// DefaultInitialMmapSize is 1 GiB on 64-bit platforms and 64 MiB on
	// 32-bit ones; Options.InitialMmapSize's default but on Windows.
	DefaultInitialMmapSize = 1 << (26 + 4*(bits.UintSize/64))
	// DefaultMaxHandlerStats is the default of Options.MaxHandlerStats.
	DefaultMaxHandlerStats = 1000
	// DefaultMaxParked is the default of Options.MaxParked.
	DefaultMaxParked = 10000
)

// MaxWindows is the most windows Retention may span (Retention/WindowSpan):
// each costs every look-up of an unseen key a filter probe
// (docs/design/windows-and-filters.md). It allows 7 days of 10-minute
// windows.
const MaxWindows = 1024

// maxInitialMmapSize bounds Options.InitialMmapSize: 1 TiB on 64-bit
// platforms, 1 GiB on 32-bit ones.
const maxInitialMmapSize = 1 << (30 + 10*(bits.UintSize/64))

// Options configures a DB; nil, or a zero field, takes the defaults. Open
// works on a copy and reports every invalid field at once.
type Options struct {
	// OpenTimeout bounds how long Open waits for another holder of the file
	// to let go before failing with ErrLocked. Default 3s.
	OpenTimeout time.Duration

	// NoSync skips fsync on commit. UNSAFE: a power loss can lose
	// acknowledged effects or corrupt the file; see DB.Sync. Default false.
	NoSync bool

	// FileMode is the permission of a newly created file. Default 0600.
	FileMode os.FileMode

	// Retention is the dedup window: a key is deduplicated for at least this
	// long after it was first seen. Default 7 days; at least WindowSpan, at
	// most MaxWindows times it. It may change between Opens.
	Retention time.Duration

	// TombstoneRetention, when not zero, keeps a tombstone of every final
	// mark after Retention, until TombstoneRetention after its window: a
	// duplicate that meets one is still suppressed, without its response
	// (Result.ResponseExpired), at about 22 bytes a key instead of the
	// mark's (docs/window.md). Default 0: off, marks expire after
	// Retention. Otherwise more than Retention, and at most MaxWindows
	// times WindowSpan, as each tombstone window costs a look-up of an
	// unseen key a filter probe. It may change between Opens.
	TombstoneRetention time.Duration

	// WindowSpan is the width of a window of marks. A file keeps the span it
	// was created with: zero means the file's (1h for a new file), another
	// value is refused with ErrInvalidOptions.
	WindowSpan time.Duration

	// ExpireInterval is how often expiry runs in the background. Default
	// 1 minute; negative disables it (call DB.Expire yourself).
	ExpireInterval time.Duration

	// ExpireStep is the most marks one expiry transaction deletes, which
	// bounds how long expiry holds up a writer. Default 10000.
	ExpireStep int

	// Now is the clock. Default time.Now. Tests inject a fake one.
	Now func() time.Time

	// MaxClockJump bounds how far ahead of the store's time a reading of Now
	// is believed at once; a further one is held back until three readings
	// agree, and counted in Stats.ClockJumps (docs/design/clock.md). Open
	// takes one reading as is, so the bound holds for the first call too.
	// Default 24h; negative disables the bound (and Open's reading).
	MaxClockJump time.Duration

	// BloomFalsePositiveRate is the target false-positive rate of each
	// window's Bloom filter. Default 0.01; below 0.5; negative disables the
	// filters (every look-up then reads every live window, still correct).
	BloomFalsePositiveRate float64

	// MaxGroupSize caps how many concurrent Apply calls share one commit.
	// Default 1000.
	MaxGroupSize int

	// KeepOrphanedClaims keeps the claims found IN_PROGRESS at Open until
	// their leases run out, instead of releasing them at once: for an
	// external system that cannot deduplicate on Claim.Key
	// (docs/design/claims.md). Default false.
	KeepOrphanedClaims bool

	// ReadOnly opens the file for reading under a shared lock, so that
	// several processes may read it while no writer has it. Every write
	// fails with ErrReadOnly; nothing runs in the background and Close
	// writes nothing. The file must have been opened writable once.
	// Default false.
	ReadOnly bool

	// InitialMmapSize is how much of the file bbolt maps at Open, in bytes:
	// a commit growing the file past the map waits for every open View.
	// Default DefaultInitialMmapSize, -1 on Windows (where bbolt extends the
	// file to the map); at most 1 TiB (1 GiB on 32-bit); negative maps only
	// what the file needs (docs/design/mmap-and-readers.md).
	InitialMmapSize int

	// MaxHandlerStats caps the handlers with an entry of their own in
	// Stats.Handlers; later ones count in Stats.OtherHandlers. An entry costs
	// about 700 bytes plus its name (its counters and its duplicates'
	// ages). Default 1000; negative keeps none.
	MaxHandlerStats int

	// MaxParked caps the keys parked at once, waiting for an operator
	// (DB.ClaimWith's probe, DB.Parked). A parked key costs its mark and an
	// index record on disk, and every expiry that would drop its window
	// moves it to the newest one; past the cap a probe's OutcomeUnknown
	// returns ErrParkFull and parks nothing (docs/design/probe.md). Default
	// 10000; negative parks none.
	MaxParked int

	// Logger receives "duplicate suppressed" at info level and other
	// events. Default: nothing is logged.
	Logger *slog.Logger
}

// withDefaults returns a copy of o (nil allowed) with its defaults filled
// in, and every problem with it.
func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	if c.OpenTimeout == 0 {
		c.OpenTimeout = DefaultOpenTimeout
	}
	if c.FileMode == 0 {
		c.FileMode = DefaultFileMode
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.ExpireInterval == 0 {
		c.ExpireInterval = DefaultExpireInterval
	}
	if c.ExpireStep == 0 {
		c.ExpireStep = DefaultExpireStep
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.MaxClockJump == 0 {
		c.MaxClockJump = DefaultMaxClockJump
	}
	if c.BloomFalsePositiveRate == 0 {
		c.BloomFalsePositiveRate = DefaultBloomFalsePositiveRate
	}
	if c.MaxGroupSize == 0 {
		c.MaxGroupSize = DefaultMaxGroupSize
	}
	if c.InitialMmapSize == 0 {
		c.InitialMmapSize = DefaultInitialMmapSize
		if runtime.GOOS == "windows" {
			c.InitialMmapSize = -1 // a map there is a file that long on disk
		}
	}
	if c.MaxHandlerStats == 0 {
		c.MaxHandlerStats = DefaultMaxHandlerStats
	}
	if c.MaxParked == 0 {
		c.MaxParked = DefaultMaxParked
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, c.validate()
}

// validate reports every invalid field at once.
func (o *Options) validate() error {
	var errs []error
	bad := func(field string, value any, why string) {
		errs = append(errs, fmt.Errorf("%w: %s = %v: %s", ErrInvalidOptions, field, value, why))
	}
	if o.OpenTimeout < 0 {
		bad("OpenTimeout", o.OpenTimeout, "must be positive (zero means the default)")
	}
	if o.FileMode&^os.ModePerm != 0 {
		bad("FileMode", o.FileMode, "only permission bits are allowed")
	}
	if r := o.BloomFalsePositiveRate; r >= 0.5 || r != r {
		bad("BloomFalsePositiveRate", r, "must be below 0.5 (negative disables the filters)")
	}
	if o.ExpireStep < 0 {
		bad("ExpireStep", o.ExpireStep, "must be positive (zero means the default)")
	}
	if o.TombstoneRetention < 0 {
		bad("TombstoneRetention", o.TombstoneRetention, "must not be negative (zero means no tombstones)")
	}
	if o.MaxGroupSize < 0 {
		bad("MaxGroupSize", o.MaxGroupSize, "must be positive (zero means the default)")
	}
	if o.InitialMmapSize > maxInitialMmapSize {
		bad("InitialMmapSize", o.InitialMmapSize, fmt.Sprintf("must be at most %d (negative maps only what the file needs)", maxInitialMmapSize))
	}
	switch {
	case o.WindowSpan < 0:
		bad("WindowSpan", o.WindowSpan, "must be positive (zero means the file's, 1h for a new file)")
	case o.WindowSpan == 0:
		// Checked against Retention once the file's span is known.
		if o.Retention < 0 {
			bad("Retention", o.Retention, "must be positive (zero means the default)")
		}
	default:
		errs = append(errs, o.validateWindows())
	}
	return errors.Join(errs...)
}

// validateWindows checks Retention against WindowSpan, naming the fields.
func (o *Options) validateWindows() error {
	if o.Retention < o.WindowSpan {
		return fmt.Errorf("%w: Retention = %v: must be at least WindowSpan (%v)", ErrInvalidOptions, o.Retention, o.WindowSpan)
	}
	if n := o.Retention / o.WindowSpan; n > MaxWindows {
		return fmt.Errorf("%w: Retention %v / WindowSpan %v is %d windows, over the limit of MaxWindows = %d: "+
			"make WindowSpan at least %v or Retention shorter",
			ErrInvalidOptions, o.Retention, o.WindowSpan, n, MaxWindows, (o.Retention+MaxWindows-1)/MaxWindows)
	}
	switch t := o.TombstoneRetention; {
	case t == 0:
	case t <= o.Retention:
		return fmt.Errorf("%w: TombstoneRetention = %v: must be longer than Retention (%v), or 0 for no tombstones",
			ErrInvalidOptions, t, o.Retention)
	case t/o.WindowSpan > MaxWindows:
		return fmt.Errorf("%w: TombstoneRetention %v / WindowSpan %v is %d windows, over the limit of MaxWindows = %d: "+
			"make WindowSpan at least %v or TombstoneRetention shorter",
			ErrInvalidOptions, t, o.WindowSpan, t/o.WindowSpan, MaxWindows, (t+MaxWindows-1)/MaxWindows)
	}
	return nil
}

func (o *Options) window() window.Config {
	return window.Config{Span: o.WindowSpan, Retention: o.Retention}
}
