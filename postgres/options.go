package postgres

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/oncekv/oncekv"
)

// Defaults of Options' fields.
const (
	DefaultSchema    = "oncekv"
	DefaultRetention = oncekv.DefaultRetention
	// DefaultWindowSpan is the span of a new schema's partitions, or its
	// Retention when that is shorter: a day, not the embedded store's
	// hour, because every live partition costs every look-up its
	// planning, locks and an index probe (a duplicate took 0.10 ms with
	// 8 live partitions, 0.24 ms with 29, 0.74 ms with 169:
	// BenchmarkApplyWindows), and a day keeps 8 for the default Retention.
	DefaultWindowSpan     = 24 * time.Hour
	DefaultExpireInterval = oncekv.DefaultExpireInterval
	DefaultLockTimeout    = 2 * time.Second
)

// maxSchemaName is PostgreSQL's NAMEDATALEN less one: a longer identifier
// would be cut silently, and two stores could end up in one schema.
const maxSchemaName = 63

// Options configures a Store. A zero field takes its default; Open works
// on a copy.
type Options struct {
	// Schema is the PostgreSQL schema holding the store's tables, created
	// if missing. Several stores share one database through distinct
	// schemas. Default "oncekv". At most 63 bytes, no NUL.
	Schema string

	// Retention is the dedup window: a key is deduplicated for at least
	// this long after it was first seen; a retry after it is applied
	// again. Default 7 days. At least WindowSpan, at most
	// oncekv.MaxWindows times it. Every host using the schema should
	// give the same: expiry on any host drops by its own.
	Retention time.Duration

	// TombstoneRetention, when not zero, keeps a tombstone of every final
	// mark after Retention, as oncekv.Options.TombstoneRetention does:
	// when expiry drops a window's partition of marks, it first copies
	// each DONE and FAILED mark's window, FirstSeen, state and id into a
	// partition of the tombstones table, which is dropped in turn
	// TombstoneRetention after the window's end. A duplicate that meets
	// one is still suppressed, without its response
	// (oncekv.Result.ResponseExpired) and without a fingerprint to detect
	// key reuse. Default 0: off. Otherwise more than Retention, and at
	// most oncekv.MaxWindows times the window span. Every host using the
	// schema should give the same.
	TombstoneRetention time.Duration

	// WindowSpan is the range of one partition of the marks table. It is
	// fixed when the schema is created: zero means the schema's (for a new
	// one DefaultWindowSpan, 24h, or Retention when shorter), and another
	// value than the schema's is refused with oncekv.ErrInvalidOptions.
	WindowSpan time.Duration

	// Now is the clock of windows, leases and expiry. Default: the
	// database's clock (clock_timestamp() of the server, measured at Open
	// and again every minute, read in between on the local monotonic
	// clock), one clock for every host. Tests inject a fake one. Either
	// way the store's time never goes backwards.
	Now func() time.Time

	// ExpireInterval is how often expiry (and the creation of the
	// partitions ahead) runs in the background. Default 1 minute;
	// negative disables it: call Expire yourself, and partitions are
	// created when a write first needs one.
	ExpireInterval time.Duration

	// LockTimeout bounds how long the store's DDL (attaching a new
	// partition, detaching and dropping an expired one) waits for a lock,
	// as PostgreSQL's lock_timeout, so that it never queues the duplicate
	// path behind a long effect. DDL that timed out is tried again at the
	// next expiry. Default 2s.
	LockTimeout time.Duration

	// MaxParked caps the keys parked at once in the schema, waiting for an
	// operator (ClaimWith's probe, Store.ResolveParked); at the cap an
	// OutcomeUnknown parks nothing and returns oncekv.ErrParkFull, the key
	// staying claimable. Default oncekv.DefaultMaxParked; negative parks
	// none.
	MaxParked int

	// Logger receives "duplicate suppressed" at info level, parked keys
	// at warn, and the background work's failures. Default: nothing is
	// logged.
	Logger *slog.Logger
}

// withDefaults returns o with every zero field set to its default, and
// every problem with the result.
func (o Options) withDefaults() (Options, error) {
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	if o.ExpireInterval == 0 {
		o.ExpireInterval = DefaultExpireInterval
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	if o.MaxParked == 0 {
		o.MaxParked = oncekv.DefaultMaxParked
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, o.validate()
}

// validate reports every invalid field at once.
func (o *Options) validate() error {
	var errs []error
	bad := func(field string, value any, why string) {
		errs = append(errs, fmt.Errorf("%w: %s = %v: %s", oncekv.ErrInvalidOptions, field, value, why))
	}
	if len(o.Schema) > maxSchemaName {
		bad("Schema", fmt.Sprintf("%.20q…", o.Schema), fmt.Sprintf("is %d bytes, over PostgreSQL's limit of %d", len(o.Schema), maxSchemaName))
	}
	for _, c := range []byte(o.Schema) {
		if c == 0 {
			bad("Schema", fmt.Sprintf("%q", o.Schema), "must not contain a NUL byte")
			break
		}
	}
	if o.TombstoneRetention < 0 {
		bad("TombstoneRetention", o.TombstoneRetention, "must not be negative (zero means no tombstones)")
	}
	if o.LockTimeout < 0 {
		bad("LockTimeout", o.LockTimeout, "must be positive (zero means the default)")
	}
	switch {
	case o.Retention < 0:
		bad("Retention", o.Retention, "must be positive (zero means the default)")
	case o.WindowSpan < 0:
		bad("WindowSpan", o.WindowSpan, "must be positive (zero means the schema's, 24h for a new one)")
	case o.WindowSpan > 0:
		if err := checkWindows(o.Retention, o.WindowSpan); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkTombs checks TombstoneRetention against Retention and the window
// span, as the root's Options do.
func checkTombs(retention, tombs, span time.Duration) error {
	switch {
	case tombs == 0:
	case tombs <= retention:
		return fmt.Errorf("%w: TombstoneRetention = %v: must be longer than Retention (%v), or 0 for no tombstones",
			oncekv.ErrInvalidOptions, tombs, retention)
	case tombs/span > oncekv.MaxWindows:
		return fmt.Errorf("%w: TombstoneRetention %v / WindowSpan %v is %d windows, over the limit of oncekv.MaxWindows = %d",
			oncekv.ErrInvalidOptions, tombs, span, tombs/span, oncekv.MaxWindows)
	}
	return nil
}

// checkWindows checks Retention against the window span, as the root's
// Options do.
func checkWindows(retention, span time.Duration) error {
	if retention < span {
		return fmt.Errorf("%w: Retention = %v: must be at least WindowSpan (%v)", oncekv.ErrInvalidOptions, retention, span)
	}
	if n := retention / span; n > oncekv.MaxWindows {
		return fmt.Errorf("%w: Retention %v / WindowSpan %v is %d windows, over the limit of oncekv.MaxWindows = %d",
			oncekv.ErrInvalidOptions, retention, span, n, oncekv.MaxWindows)
	}
	return nil
}
