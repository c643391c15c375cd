package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/oncekv/oncekv"
)

func init() {
	register(&command{
		name: "clock", short: "show the store's clock, or rewind one saved in the future",
		args: "PATH", nargs: 1,
		summary: "Show the time the store resumes from (its saved clock, or its newest window's start)\n" +
			"against this machine's. A store whose clock was taken far ahead (a glitched reading)\n" +
			"keeps that time across restarts: its leases last that much longer and nothing\n" +
			"expires. With -rewind, stop the program that holds the store, then rewind it to the\n" +
			"true time: marks of later windows move into that time's window (none is lost),\n" +
			"leases that end later end then. Queues keep their own times.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.register(fs, true, false)
			var rewind string
			fs.StringVar(&rewind, "rewind", "", `rewind the store to this time, RFC 3339, or "now" (this machine's clock, or -now)`)
			return func(out io.Writer, args []string) error { return runClock(&sf, out, args[0], rewind) }
		},
	})
}

// clockJSON is the -json output of clock.
type clockJSON struct {
	Store   time.Time `json:"store"`   // the time the store resumes from
	Machine time.Time `json:"machine"` // this machine's clock, or -now
	Ahead   string    `json:"ahead"`   // Store - Machine, when positive
	// Rewound is set by -rewind.
	Rewound *oncekv.RewindStats `json:"rewound,omitempty"`
}

// clockAheadLimit is how far ahead of the machine the store may be before
// clock says so: a second's worth of the saves' granularity is normal.
const clockAheadLimit = time.Minute

func runClock(sf *storeFlags, out io.Writer, path, rewind string) error {
	machine := time.Now()
	if sf.now != "" {
		t, err := time.Parse(time.RFC3339Nano, sf.now)
		if err != nil {
			return &usageError{fmt.Sprintf("-now %q: %v", sf.now, err)}
		}
		machine = t
	}
	if rewind != "" {
		to := machine
		if rewind != "now" {
			t, err := time.Parse(time.RFC3339Nano, rewind)
			if err != nil {
				return &usageError{fmt.Sprintf("-rewind %q: give an RFC 3339 time or now: %v", rewind, err)}
			}
			to = t
		}
		st, err := oncekv.RewindClock(path, to, &oncekv.Options{OpenTimeout: time.Second})
		if err != nil {
			return err
		}
		return printClock(sf, out, path, clockJSON{Store: st.To, Machine: machine, Rewound: &st})
	}
	store, err := storeTime(sf, path)
	if err != nil {
		return err
	}
	return printClock(sf, out, path, clockJSON{Store: store, Machine: machine})
}

// storeTime returns the time the store at path resumes from: opened on a
// clock at 1970, its clock is what the file holds.
func storeTime(sf *storeFlags, path string) (t time.Time, err error) {
	sf.now = time.Unix(0, 0).UTC().Format(time.RFC3339Nano)
	db, err := sf.open(path, true)
	if err != nil {
		return t, err
	}
	defer closeInto(db, &err)
	return db.Now(), nil
}

func printClock(sf *storeFlags, out io.Writer, path string, c clockJSON) error {
	ahead := c.Store.Sub(c.Machine)
	if ahead > 0 {
		c.Ahead = ahead.String()
	}
	if sf.json {
		return writeJSON(out, c)
	}
	if st := c.Rewound; st != nil {
		fmt.Fprintf(out, "rewound from %s to %s: %d windows folded, %d marks moved, %d leases ended\n",
			stamp(st.From), stamp(st.To), st.Windows, st.Marks, st.Leases)
		return nil
	}
	fmt.Fprintf(out, "store:   %s\nmachine: %s\n", stamp(c.Store), stamp(c.Machine))
	if ahead > clockAheadLimit {
		fmt.Fprintf(out, "the store's clock is %v ahead of this machine's: its leases last that much longer and nothing "+
			"expires until then. If this machine's clock is right, stop the program that holds the store and run\n"+
			"  oncekv clock -rewind now %s\n", ahead.Round(time.Second), path)
	}
	return nil
}
