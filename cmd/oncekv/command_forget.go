package main

import (
	"flag"
	"fmt"
	"io"
)

func init() {
	register(&command{
		name: "forget", short: "drop a mark, so the key is applied again",
		args: "PATH HANDLER KEY", nargs: 3,
		summary: "Drop the mark of (HANDLER, KEY), so its next delivery is applied again. Refused\n" +
			"while a live claim holds the key. Exit 1 when the key has no mark.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.register(fs, false, false)
			return func(out io.Writer, args []string) (err error) {
				db, err := sf.open(args[0], false)
				if err != nil {
					return err
				}
				defer closeInto(db, &err)
				m, err := db.Mark(args[1], args[2])
				if err != nil {
					return err // ErrNotFound: exit 1, as a look-up
				}
				if err := db.Forget(args[1], args[2]); err != nil {
					return err
				}
				fmt.Fprintf(out, "%s/%s: forgot its %v mark, first seen %s\n", args[1], args[2], m.State, stamp(m.FirstSeen))
				return nil
			}
		},
	})
}
