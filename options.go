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

	// DefaultInitialMmapSize is 1 GiB on 64-bit platforms and 64 MiB on
	// 32-bit ones, whose whole address space is 2-4 GiB. It is the
	// default of Options.InitialMmapSize everywhere but on Windows.
	DefaultInitialMmapSize = 1 << (26 + 4*(bits.UintSize/64))
	// DefaultMaxHandlerStats is the default of Options.MaxHandlerStats.
	DefaultMaxHandlerStats = 1000
)

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
	// Default 7 days. Must be at least WindowSpan.
	Retention time.Duration

	// WindowSpan is the width of one time bucket of marks. Default 1h.
	WindowSpan time.Duration

	// ExpireInterval is how often expiry runs in the background. Default
	// 1 minute; negative disables it (call DB.Expire yourself).
	ExpireInterval time.Duration

	// ExpireStep is the most marks one expiry transaction deletes, which
	// bounds how long expiry can hold up a writer. Default 10000.
	ExpireStep int

	// Now is the clock. Default time.Now. Tests inject a fake one.
	Now func() time.Time

	// BloomFalsePositiveRate is the target false-positive rate of the
	// in-memory Bloom filter kept per window, which lets a key never seen
	// skip that window's B-tree look-up. Default 0.01. A negative value
	// disables the filters: every look-up then reads every live window,
	// and everything stays correct. Must be below 0.5.
	BloomFalsePositiveRate float64

	// MaxGroupSize caps how many concurrent Apply calls share one commit.
	// Default 1000.
	MaxGroupSize int

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
	// grows with the data; pages are read in only when used). Past 16 MiB of map, bbolt grows the file in 16 MiB steps, so
	// a new store's file is about 16 MiB long, but sparse: it takes the
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
	if c.WindowSpan == 0 {
		c.WindowSpan = DefaultWindowSpan
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
	if err := o.window().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidOptions, err))
	}
	return errors.Join(errs...)
}

func (o *Options) window() window.Config {
	return window.Config{Span: o.WindowSpan, Retention: o.Retention}
}
