package main

import (
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/dumpfile"
)

func init() {
	register(&command{
		name: "mark", short: "one mark: state, first seen, fingerprint, response, lease",
		args: "PATH HANDLER KEY", nargs: 3,
		summary: "Show the mark of (HANDLER, KEY), the support question \"was this message processed,\n" +
			"when, with what result?\": state, first seen, payload fingerprint, response, lease\n" +
			"and token. Exit 1 when the key has no mark.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.register(fs, true, false)
			return func(out io.Writer, args []string) error { return runMark(&sf, out, args) }
		},
	})
}

func runMark(sf *storeFlags, out io.Writer, args []string) (err error) {
	db, err := sf.open(args[0], true)
	if err != nil {
		return err
	}
	defer closeInto(db, &err)
	m, err := db.Mark(args[1], args[2])
	if err != nil {
		return err
	}
	if sf.json {
		return writeJSON(out, dumpfile.MarkOf(m))
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "handler\t%s\n", printable([]byte(m.Handler)))
	fmt.Fprintf(tw, "key\t%s\n", printable([]byte(m.Key)))
	fmt.Fprintf(tw, "state\t%v\n", m.State)
	fmt.Fprintf(tw, "first seen\t%s\n", stamp(m.FirstSeen))
	fmt.Fprintf(tw, "window\t%s\n", stamp(m.Window))
	fmt.Fprintf(tw, "fingerprint\t%x\n", m.Fingerprint[:dumpfile.StoredFingerprint])
	switch m.State {
	case oncekv.MarkDone:
		response := "(none)"
		if m.Response != nil {
			response = printable(m.Response)
		}
		fmt.Fprintf(tw, "response\t%s\n", response)
	case oncekv.MarkFailed:
		fmt.Fprintf(tw, "error\t%q\n", m.Error)
	case oncekv.MarkInProgress:
		fmt.Fprintf(tw, "lease until\t%s\n", leaseText(m, db.Now()))
	}
	fmt.Fprintf(tw, "token\t%d\n", m.Token)
	fmt.Fprintf(tw, "claim key\t%s\n", m.ClaimKey)
	return tw.Flush()
}

// leaseText describes the lease of a claim in progress at now. The store
// is opened with Options.KeepOrphanedClaims, so a lease reads as written:
// the CLI holds the file's lock, so no process holds the claim any more,
// and a program that opens the store with the default options takes it
// over at once.
func leaseText(m oncekv.MarkInfo, now time.Time) string {
	switch {
	case m.Released:
		return "released (any Claim or Apply may take it over)"
	case now.Before(m.LeaseUntil):
		return fmt.Sprintf("%s (live, %v left)", stamp(m.LeaseUntil), m.LeaseUntil.Sub(now))
	}
	return stamp(m.LeaseUntil) + " (ran out)"
}
