package main

import (
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/oncekv/oncekv/internal/dumpfile"
)

func init() {
	register(&command{
		name: "dead", short: "a queue's dead letters and why",
		args: "PATH QUEUE", nargs: 2,
		summary: "List a queue's dead letters: ID, key, ordering key, attempts, when it died, why (the\n" +
			"last error: a far side's answer, a lease that ran out, an interrupted attempt) and the\n" +
			"start of the body. Redrive them with redrive, drop them with dead-delete. PATH may be an\n" +
			"admin handler's URL.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.register(fs, true, false)
			var p pageFlags
			fs.Uint64Var(&p.after, "after", 0, "list the dead letters with IDs above this one (the last ID of a page)")
			fs.IntVar(&p.limit, "limit", 100, "list at most this many")
			return func(out io.Writer, args []string) error {
				if err := p.check(); err != nil {
					return err
				}
				return runDead(&sf, out, args[0], args[1], p)
			}
		},
	})
}

func runDead(sf *storeFlags, out io.Writer, path, name string, p pageFlags) (err error) {
	db, v, err := openView(sf, path, name)
	if err != nil {
		return err
	}
	defer closeInto(db, &err)
	ms, err := v.DeadLetters(p.after, p.limit)
	if err != nil {
		return err
	}
	if sf.json {
		for _, m := range ms {
			if err := writeJSON(out, dumpfile.MessageOf(m)); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKEY\tORDERING KEY\tATTEMPTS\tDEAD AT\tREASON\tBODY")
	for _, m := range ms {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", m.ID, printable([]byte(m.Key)), orDash(m.OrderingKey),
			m.Attempt, stamp(m.DeadAt), orDash(m.LastError), excerpt(m.Body))
	}
	if len(ms) == p.limit {
		fmt.Fprintf(tw, "(stopped at -limit %d: -after %d for the next page)\n", p.limit, ms[len(ms)-1].ID)
	}
	return tw.Flush()
}
