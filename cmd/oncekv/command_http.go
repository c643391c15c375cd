package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/dumpfile"
)

func init() {
	register(&command{
		name: "http", short: "the idemhttp record of a client's Idempotency-Key",
		args: "PATH SCOPE KEY", nargs: 3,
		summary: "Show the HTTP record idemhttp keeps for the Idempotency-Key KEY sent by the caller SCOPE\n" +
			"(what the middleware's Options.Scope returned for it): whether the request is running or\n" +
			"was answered, and the stored answer, decoded: status, replayed headers, body. The mark is\n" +
			"(handler, idemhttp.RecordKey(SCOPE, KEY)). Exit 1 when there is none. PATH may be an admin\n" +
			"handler's URL.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.register(fs, true, false)
			var handler string
			fs.StringVar(&handler, "handler", idemhttp.DefaultHandler, "the middleware's Options.Handler")
			return func(out io.Writer, args []string) error { return runHTTP(&sf, out, args, handler) }
		},
	})
}

func runHTTP(sf *storeFlags, out io.Writer, args []string, handler string) (err error) {
	db, err := sf.open(args[0], true)
	if err != nil {
		return err
	}
	defer closeInto(db, &err)
	s, err := idemhttp.Lookup(db, handler, args[1], args[2])
	if err != nil {
		return err
	}
	if sf.json {
		return writeJSON(out, dumpfile.HTTPRecordOf(s))
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "mark\t%s %s\n", printable([]byte(s.Mark.Handler)), printable([]byte(s.Mark.Key)))
	fmt.Fprintf(tw, "state\t%v\n", s.Mark.State)
	fmt.Fprintf(tw, "first seen\t%s\n", stamp(s.Mark.FirstSeen))
	if s.Mark.State == oncekv.MarkInProgress {
		fmt.Fprintf(tw, "lease until\t%s\n", leaseText(s.Mark, db.Now()))
	}
	if r := s.Record; r != nil {
		fmt.Fprintf(tw, "status\t%d\n", r.Status)
		names := make([]string, 0, len(r.Header))
		for name := range r.Header {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			for _, v := range r.Header[name] {
				fmt.Fprintf(tw, "header\t%s: %s\n", name, v)
			}
		}
		body := printable(r.Body)
		if r.BodyOmitted {
			body = "(omitted: over the middleware's MaxRecordBytes)"
		}
		fmt.Fprintf(tw, "body\t%s\n", body)
	}
	return tw.Flush()
}
