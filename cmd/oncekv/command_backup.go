package main

import (
	"flag"
	"fmt"
	"io"
)

func init() {
	register(&command{
		name: "backup", short: "copy the store into a new file",
		args: "PATH DST", nargs: 2,
		summary: "Write a consistent copy of the store to the new file DST, through DB.BackupFile\n" +
			"(a temporary file, fsynced, renamed). DST must not exist. A store that a program\n" +
			"has open is locked: give the URL of the program's admin handler for PATH (its hot\n" +
			"backup), or have the program call DB.BackupFile itself.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.registerRemote(fs)
			return func(out io.Writer, args []string) (err error) {
				if exists(args[1]) {
					return fmt.Errorf("oncekv: backup: %s exists; choose a new file", args[1])
				}
				db, err := sf.open(args[0], true)
				if err != nil {
					return err
				}
				defer closeInto(db, &err)
				n, err := db.BackupFile(args[1])
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "backed up %s into %s (%d bytes)\n", redacted(args[0]), args[1], n)
				return nil
			}
		},
	})
}
