package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"text/tabwriter"
)

func init() {
	register(&command{
		name: "expire", short: "drop the expired windows (-dry-run: list them)",
		args: "PATH", nargs: 1,
		summary: "Drop the windows older than -retention, as the program's background expiry would.\n" +
			"With -dry-run, list them and change nothing. Set -retention to the program's:\n" +
			"the file does not keep it.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.register(fs, true, true)
			var dry bool
			fs.BoolVar(&dry, "dry-run", false, "list what would be dropped; change nothing (-json applies to it)")
			return func(out io.Writer, args []string) error {
				if dry {
					return expireDryRun(&sf, out, args[0])
				}
				return runExpire(&sf, out, args[0])
			}
		},
	})
}

func expireDryRun(sf *storeFlags, out io.Writer, path string) (err error) {
	db, err := sf.open(path, true)
	if err != nil {
		return err
	}
	defer closeInto(db, &err)
	due, err := db.ExpireDue()
	if err != nil {
		return err
	}
	if sf.json {
		for _, w := range windowsJSON(due) {
			if err := writeJSON(out, w); err != nil {
				return err
			}
		}
		return nil
	}
	var marks uint64
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "START\tEND\tMARKS")
	for _, w := range due {
		marks += w.Marks
		fmt.Fprintf(tw, "%s\t%s\t%d\n", stamp(w.Start), stamp(w.End), w.Marks)
	}
	fmt.Fprintf(tw, "would drop %d windows, %d marks (dry run: nothing changed)\n", len(due), marks)
	return tw.Flush()
}

func runExpire(sf *storeFlags, out io.Writer, path string) (err error) {
	if sf.json {
		return &usageError{"-json applies to -dry-run only"}
	}
	db, err := sf.open(path, false)
	if err != nil {
		return err
	}
	defer closeInto(db, &err)
	// Interrupted, Expire stops between steps; the windows stay dropped and
	// the next expiry finishes deleting them.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	st, err := db.Expire(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "dropped %d windows, %d marks, in %d steps (longest %v)\n", st.Windows, st.Marks, st.Steps, st.LongestStep)
	return nil
}
