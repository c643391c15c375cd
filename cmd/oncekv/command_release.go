package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/oncekv/oncekv"
)

func init() {
	register(&command{
		name: "release", short: "release the claim of a dead worker",
		args: "PATH HANDLER KEY", nargs: 3,
		summary: "Release the claim on (HANDLER, KEY) whose worker is known to be dead, so the next\n" +
			"Claim or Apply takes the key over at once. Refused while the lease is live, unless\n" +
			"-force. Exit 1 when the key has no mark.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.register(fs, false, false)
			var force bool
			fs.BoolVar(&force, "force", false, "release even while the lease is live (says what it risks)")
			return func(out io.Writer, args []string) error { return runRelease(&sf, out, args, force) }
		},
	})
}

// warnings go to standard error, apart from the output a script reads.
var warnings io.Writer = os.Stderr

func runRelease(sf *storeFlags, out io.Writer, args []string, force bool) (err error) {
	db, err := sf.open(args[0], false)
	if err != nil {
		return err
	}
	defer closeInto(db, &err)
	handler, key := args[1], args[2]
	m, err := db.Mark(handler, key)
	switch {
	case err != nil:
		return err
	case m.State != oncekv.MarkInProgress:
		return fmt.Errorf("%w: release: %s/%s is %v, not a claim in progress", oncekv.ErrClaimDone, handler, key, m.State)
	case m.Released:
		fmt.Fprintf(out, "%s/%s: already released\n", handler, key)
		return nil
	}
	if now := db.Now(); now.Before(m.LeaseUntil) {
		if !force {
			return fmt.Errorf("%w: release refused: the lease of %s/%s (token %d) is live until %s, %v from now, "+
				"and its worker may still be running; wait, or use -force if you know it is dead",
				oncekv.ErrInProgress, handler, key, m.Token, stamp(m.LeaseUntil), m.LeaseUntil.Sub(now))
		}
		fmt.Fprintf(warnings, "oncekv: warning: releasing a live claim (lease until %s). If its worker is still running, "+
			"a second worker may now take the key over and make the external call again: only an external system "+
			"that deduplicates on claim key %s does the work once. The first worker's Complete then fails with ErrFenced.\n",
			stamp(m.LeaseUntil), m.ClaimKey)
	}
	if err := db.ReleaseClaim(handler, key, m.Token); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s/%s: released (token %d)\n", handler, key, m.Token)
	return nil
}
