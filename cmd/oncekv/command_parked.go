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
		name: "parked", short: "list the keys parked for an operator",
		args: "PATH", nargs: 1,
		summary: "List the keys a takeover's probe parked (DB.ClaimWith): the probe could not tell\n" +
			"whether an earlier attempt applied its effect, so every delivery of the key is\n" +
			"refused with ErrParked until it is resolved (oncekv resolve). Each row names the\n" +
			"attempt in doubt: its token and claim key, which the external system may have seen.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.register(fs, true, false)
			return func(out io.Writer, args []string) error { return runParked(&sf, out, args[0]) }
		},
	})
}

// parkedJSON is a parked key as parked -json prints it.
type parkedJSON struct {
	dumpfile.Mark
	AttemptStarted time.Time `json:"attempt_started"`
	ParkedAt       time.Time `json:"parked_at"`
	Takeovers      int       `json:"takeovers"`
}

func runParked(sf *storeFlags, out io.Writer, path string) (err error) {
	db, err := sf.open(path, true)
	if err != nil {
		return err
	}
	defer closeInto(db, &err)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if !sf.json {
		fmt.Fprintln(tw, "PARKED AT\tTOKEN\tATTEMPT STARTED\tTAKEOVERS\tHANDLER\tKEY\tCLAIM KEY")
	}
	n := 0
	err = db.Parked(func(m oncekv.MarkInfo) error {
		n++
		if sf.json {
			return writeJSON(out, parkedJSON{Mark: dumpfile.MarkOf(m), AttemptStarted: m.AttemptStarted.UTC(), ParkedAt: m.ParkedAt.UTC(), Takeovers: m.Takeovers})
		}
		_, err := fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%s\n", stamp(m.ParkedAt), m.Token, stamp(m.AttemptStarted), m.Takeovers,
			printable([]byte(m.Handler)), printable([]byte(m.Key)), m.ClaimKey)
		return err
	})
	if err != nil || sf.json {
		return err
	}
	if n == 0 {
		fmt.Fprintln(tw, "(no parked keys)")
	}
	return tw.Flush()
}
