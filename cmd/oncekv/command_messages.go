package main

import (
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/oncekv/oncekv/internal/dumpfile"
	"github.com/oncekv/oncekv/queue"
)

func init() {
	register(&command{
		name: "messages", short: "a queue's live messages: state, attempt, next visible, last error",
		args: "PATH QUEUE", nargs: 2,
		summary: "List a queue's live messages in enqueue order: ID, key, ordering key, when enqueued, attempt, state\n" +
			"(ready, in flight, delayed, waiting behind an earlier message of its key), when it is\n" +
			"next visible, the last error and the start of the body. PATH may be an admin handler's URL.",
		flags: listFlags(&messageList{
			header: "ID\tKEY\tORDERING KEY\tENQUEUED\tATTEMPT\tSTATE\tNEXT VISIBLE\tLAST ERROR\tBODY",
			read:   (*queue.View).Messages,
			row: func(m *queue.Message, now time.Time) string {
				return fmt.Sprintf("%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s", m.ID, printable([]byte(m.Key)), orDash(m.OrderingKey),
					stamp(m.EnqueuedAt), m.Attempt, messageState(m, now), stamp(m.VisibleAt), orDash(m.LastError), excerpt(m.Body))
			},
		}),
	})
}

// messageList is a listing of a queue's messages (live ones, or dead
// letters): how to read a page, and its rows.
type messageList struct {
	header string
	read   func(v *queue.View, after uint64, limit int) ([]*queue.Message, error)
	row    func(m *queue.Message, now time.Time) string
}

// listFlags registers the flags of a listing of l, and returns what runs it.
func listFlags(l *messageList) func(fs *flag.FlagSet) func(io.Writer, []string) error {
	return func(fs *flag.FlagSet) func(io.Writer, []string) error {
		var sf storeFlags
		sf.register(fs, true, false)
		var p pageFlags
		fs.Uint64Var(&p.after, "after", 0, "list the messages with IDs above this one (the last ID of a page)")
		fs.IntVar(&p.limit, "limit", 100, "list at most this many")
		return func(out io.Writer, args []string) error {
			if err := p.check(); err != nil {
				return err
			}
			return l.run(&sf, out, args[0], args[1], p)
		}
	}
}

func (l *messageList) run(sf *storeFlags, out io.Writer, path, name string, p pageFlags) (err error) {
	db, v, err := openView(sf, path, name)
	if err != nil {
		return err
	}
	defer closeInto(db, &err)
	ms, err := l.read(v, p.after, p.limit)
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
	now := db.Now()
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, l.header)
	for _, m := range ms {
		fmt.Fprintln(tw, l.row(m, now))
	}
	if len(ms) == p.limit {
		fmt.Fprintf(tw, "(stopped at -limit %d: -after %d for the next page)\n", p.limit, ms[len(ms)-1].ID)
	}
	return tw.Flush()
}

// orDash quotes s for a row, "-" when empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return printable([]byte(s))
}
