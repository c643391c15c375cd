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
	// 32-bit ones, whose whole address space is 2-4 GiB. It is the
	// default of Options.InitialMmapSize everywhere but on Windows.
	DefaultInitialMmapSize = 1 << (26 + 4*(bits.UintSize/64))
	// DefaultMaxHandlerStats is the default of Options.MaxHandlerStats.
	DefaultMaxHandlerStats = 1000
)

// MaxWindows is the most windows Retention may span: Retention/WindowSpan
// must not exceed it. Every live window costs a filter probe (a few cache
// misses) on each look-up of an unseen key, a B-tree look-up without
// filters, and a filter of at least 5 KiB. With the filters, a unique
// Apply (sync off) on 1024 windows cost 2.3 times what it cost on the
// default 168 (BenchmarkManyWindows), a fraction of one fsync; on 4096 it
// cost 5.8 times, about 2 ms. It allows 7 days of 10-minute windows, or
// 42 days of 1h ones.
const MaxWindows = 1024

// maxInitialMmapSize bounds Options.InitialMmapSize: 1 TiB on 64-bit
// platforms, 1 GiB on 32-bit ones. Larger values are address space no
// store of this kind needs, and may not be mappable at all.
const maxInitialMmapSize = 1 << (30 + 10*(bits.UintSize/64))

// Options configures a DB. Pass nil to Open for all defaults; a zero field
// takes its default. Open works on a copy, so the caller's struct is never
// changed.
type Options struct {
	// OpenTimeout bounds how long Open waits for another process (or
	// another DB in this process) to release the file before failing with
	// ErrLocked. Default 3s. It cannot be infinite: a hung open is worse
	// than an error that names the path.
	OpenTimeout time.Duration

	// NoSync skips fsync on commit (bbolt's NoSync). UNSAFE: a power loss
	// or OS crash can lose acknowledged effects and marks, or corrupt the
	// file. For benchmarks and tests only. Default false.
	NoSync bool

	// FileMode is the permission of a newly created file. Default 0600.
	FileMode os.FileMode

	// Retention is the dedup window: a key is deduplicated for at least
	// this long after it was first seen; a retry after it is applied again.
	// Default 7 days. Must be at least WindowSpan, and at most MaxWindows
	// times it. It may change from one Open to the next: the Retention in
	// force is the one kept.
	Retention time.Duration

	// WindowSpan is the width of one time bucket of marks. A file keeps
	// the span it was created with, because its windows' ends are computed
	// from it: zero means the file's span (1h for a new file), and another
	// value than the file's is refused with ErrInvalidOptions. A file
	// written before the span was stored is taken to have been made with
	// the span of its first Open by this version (zero meaning 1h, as
	// before), which is then recorded; one whose windows are not aligned to
	// it is refused.
	WindowSpan time.Duration

	// ExpireInterval is how often expiry runs in the background. Default
	// 1 minute; negative disables it (call DB.Expire yourself).
	ExpireInterval time.Duration

	// ExpireStep is the most marks one expiry transaction deletes, which
	// bounds how long expiry can hold up a writer. Default 10000.
	ExpireStep int

	// Now is the clock. Default time.Now. Tests inject a fake one.
	Now func() time.Time

	// MaxClockJump bounds how far ahead of the latest reading the store
	// believes Now at once. A reading further ahead (a bad NTP answer, a
	// VM clock glitch) is held back: the store's time stays where it was
	// until three readings in a row agree (within MaxClockJump of each
	// other) on the new time; a reading back in range ends the episode.
	// Each episode is logged at warn level and counted in
	// Stats.ClockJumps. So one wild reading cannot issue a lease that
	// lasts decades, open a window in the future or expire every mark.
	// The first reading after Open is taken as is: a stopped process
	// cannot tell downtime from a jump. Default 24h; negative disables the
	// bound.
	MaxClockJump time.Duration

	// BloomFalsePositiveRate is the target false-positive rate of the
	// in-memory Bloom filter kept per window, which lets a key never seen
	// skip that window's B-tree look-up. Default 0.01. A negative value
	// disables the filters: every look-up then reads every live window,
	// and everything stays correct. Must be below 0.5.
	BloomFalsePositiveRate float64

	// MaxGroupSize caps how many concurrent Apply calls share one commit.
	// Default 1000.
	MaxGroupSize int

	// KeepOrphanedClaims keeps, until their leases run out, the claims found
	// IN_PROGRESS when the store is opened. Only one process writes the
	// file, so those belong to a process that is gone, and by default they
	// are released at once: the next Claim or Apply of the key takes it over
	// without waiting for the lease. The dead worker may have made its
	// external call already; the taker calls again with the same Claim.Key,
	// so an external system that deduplicates on it does the work once. Set
	// this when the external system cannot deduplicate, to wait the lease
	// out. Default false.
	KeepOrphanedClaims bool

	// ReadOnly opens the file for reading only, under a shared lock, so
	// that several processes (a support tool, a backup) may open it at once
	// while no writer has it. Every write (Apply or Claim of a key not done
	// yet, Update, Forget, Expire, NextFence, ReleaseClaim) fails with
	// ErrReadOnly; duplicates and look-ups are answered as usual. Nothing
	// runs in the background, and Close writes nothing. The file must
	// exist and have been opened writable once. Default false.
	ReadOnly bool

	// InitialMmapSize is how much of the file bbolt maps into memory at
	// Open, in bytes. Default DefaultInitialMmapSize (1 GiB on 64-bit
	// platforms), except on Windows, where it is -1 (see below); at most
	// 1 TiB (1 GiB on 32-bit platforms). A negative value maps only what
	// the file needs, as bbolt does by default.
	//
	// Why: bbolt cannot move its memory map while a read transaction
	// holds it, so a commit that grows the file past the map waits for
	// every open View (and, while it waits, new Views wait behind it).
	// Within the map, readers never block writers. The map is address
	// space, not memory: on Linux (measured; bbolt maps the same way on
	// the other Unix systems) it costs no RAM and no disk (the file still
	// grows with the data; pages are read in only when used). Past 16 MiB
	// of map, bbolt grows the file in 16 MiB steps, so a new store's file is about 16 MiB long, but sparse: it takes the
	// disk space of its data. On Windows bbolt extends the file to the
	// whole map at Open, taking that much disk, hence the default of -1
	// there: set it to what the store will need.
	InitialMmapSize int

	// MaxHandlerStats caps how many handlers get an entry of their own in
	// Stats.Handlers: the first MaxHandlerStats handler names seen since
	// Open do; every later one is counted in Stats.OtherHandlers. Names
	// come from requests, so without a cap a stream of distinct names
	// would grow memory without end. An entry costs a few hundred bytes
	// (about 340 measured with a short name) plus its name, at most 32 KiB.
	// Requests rejected as invalid never create an entry.
	// Default 1000; negative keeps no per-handler entries at all.
	MaxHandlerStats int

	// Logger receives "duplicate suppressed" at info level and other
	// events. Default: nothing is logged.
	Logger *slog.Logger
}

// withDefaults returns a copy of o (nil allowed) with every zero field set to
// its default, and every problem with the result.
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
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, c.validate()
}

// validate reports every invalid field at once, so a user fixes them in one
// go.
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

// validateWindows checks Retention against WindowSpan, naming the fields
// the caller set (window.Config.Validate would name its own).
func (o *Options) validateWindows() error {
	if o.Retention < o.WindowSpan {
		return fmt.Errorf("%w: Retention = %v: must be at least WindowSpan (%v)", ErrInvalidOptions, o.Retention, o.WindowSpan)
	}
	if n := o.Retention / o.WindowSpan; n > MaxWindows {
		return fmt.Errorf("%w: Retention %v / WindowSpan %v is %d windows, over the limit of MaxWindows = %d: "+
			"make WindowSpan at least %v or Retention shorter",
			ErrInvalidOptions, o.Retention, o.WindowSpan, n, MaxWindows, (o.Retention+MaxWindows-1)/MaxWindows)
	}
	return nil
}

func (o *Options) window() window.Config {
	return window.Config{Span: o.WindowSpan, Retention: o.Retention}
}
