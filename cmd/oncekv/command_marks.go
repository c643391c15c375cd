package main

import (
	"errors"
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
		name: "marks", short: "list marks, by handler, state or window",
		args: "PATH", nargs: 1,
		summary: "List marks, oldest window first, optionally of one handler, state or window.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.register(fs, true, false)
			var handler, state, win string
			var limit int
			fs.StringVar(&handler, "handler", "", "only the marks of this handler")
			fs.StringVar(&state, "state", "", "only the marks in this state: DONE, FAILED, IN_PROGRESS or PARKED")
			fs.StringVar(&win, "window", "", "only the marks of the window starting at this time, RFC 3339 (see stats)")
			fs.IntVar(&limit, "limit", 100, "print at most this many marks; 0 prints them all")
			return func(out io.Writer, args []string) error {
				filter := oncekv.MarkFilter{Handler: handler}
				if state != "" {
					if filter.State = dumpfile.States[state]; filter.State == 0 {
						return &usageError{fmt.Sprintf("-state %q: want DONE, FAILED, IN_PROGRESS or PARKED", state)}
					}
				}
				if win != "" {
					t, err := time.Parse(time.RFC3339Nano, win)
					if err != nil {
						return &usageError{fmt.Sprintf("-window %q: %v", win, err)}
					}
					filter.Window = t
				}
				if limit < 0 {
					return &usageError{fmt.Sprintf("-limit %d: must not be negative", limit)}
				}
				return listMarks(&sf, out, args[0], filter, limit, markRow)
			}
		},
	})
}

// errLimit stops a listing at its -limit.
var errLimit = errors.New("limit reached")

// listMarks prints the marks filter selects, at most limit of them (all
// when 0), as JSON lines or as rows that row formats under its header.
func listMarks(sf *storeFlags, out io.Writer, path string, filter oncekv.MarkFilter, limit int, row func(m oncekv.MarkInfo, now time.Time) string) (err error) {
	db, err := sf.open(path, true)
	if err != nil {
		return err
	}
	defer closeInto(db, &err)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if !sf.json {
		fmt.Fprintln(tw, row(oncekv.MarkInfo{}, time.Time{}))
	}
	n, now := 0, db.Now()
	err = db.Marks(filter, func(m oncekv.MarkInfo) error {
		if limit > 0 && n == limit {
			return errLimit
		}
		n++
		if sf.json {
			return writeJSON(out, dumpfile.MarkOf(m))
		}
		_, err := fmt.Fprintln(tw, row(m, now))
		return err
	})
	limited := errors.Is(err, errLimit)
	if limited {
		err = nil
	}
	if err != nil || sf.json {
		return err
	}
	if limited {
		fmt.Fprintf(tw, "(stopped at -limit %d)\n", limit)
	}
	return tw.Flush()
}

// markRow is a row of marks; the zero mark gives the header.
func markRow(m oncekv.MarkInfo, _ time.Time) string {
	if m.Handler == "" {
		return "STATE\tFIRST SEEN\tWINDOW\tHANDLER\tKEY"
	}
	return fmt.Sprintf("%v\t%s\t%s\t%s\t%s", m.State, stamp(m.FirstSeen), stamp(m.Window), printable([]byte(m.Handler)), printable([]byte(m.Key)))
}
