package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/oncekv/oncekv/queue"
)

func init() {
	register(&command{
		name: "redrive", short: "put dead letters back in their queue",
		args: "PATH QUEUE ID...", nargs: 3, moreArgs: true,
		summary: "Put the dead letters ID... of QUEUE back in line, with their keys (a consumer that\n" +
			"deduplicates on the key does not apply one twice), visible now; the dead head of an\n" +
			"ordering key goes back at its head, so its later messages follow it in order. A far side\n" +
			"that stored its refusal under the key answers it again: fix the cause first. Run it with\n" +
			"the program stopped (or have the program call queue.Redrive). Exit 1 if an ID is no dead\n" +
			"letter (the others are redriven).",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.register(fs, false, false)
			return func(out io.Writer, args []string) error {
				return steerDead(&sf, out, args, "redriven", func(q *queue.Queue, id uint64) (string, error) {
					newID, err := q.Redrive(context.Background(), id)
					if newID == id {
						return "back at the head of its ordering key", err
					}
					return fmt.Sprintf("as message %d", newID), err
				})
			}
		},
	})
}

// steerDead opens QUEUE of the store PATH for writing and applies do to
// each dead letter ID of args, reporting each; an ID that is no dead
// letter is reported and ends in exit 1 once the others are done.
func steerDead(sf *storeFlags, out io.Writer, args []string, did string, do func(q *queue.Queue, id uint64) (string, error)) (err error) {
	ids := make([]uint64, 0, len(args)-2)
	for _, a := range args[2:] {
		id, err := strconv.ParseUint(a, 10, 64)
		if err != nil || id == 0 {
			return &usageError{fmt.Sprintf("ID %q: want a dead letter's ID (see oncekv dead)", a)}
		}
		ids = append(ids, id)
	}
	db, err := sf.open(args[0], false)
	if err != nil {
		return err
	}
	defer closeInto(db, &err)
	if _, err := queue.NewView(db, args[1]); err != nil {
		return err // not created by the Open below
	}
	// Leases are left as they are: the command changes only what it was
	// asked to.
	q, err := queue.Open(db, args[1], &queue.Options{KeepOrphanedLeases: true})
	if err != nil {
		return err
	}
	defer q.Close()
	var missing error
	for _, id := range ids {
		how, err := do(q, id)
		switch {
		case err == nil:
			fmt.Fprintln(out, strings.TrimSpace(fmt.Sprintf("%s: dead letter %d %s %s", args[1], id, did, how)))
		case missing == nil && isNotFound(err):
			fmt.Fprintln(warnings, err)
			missing = err
		case isNotFound(err):
			fmt.Fprintln(warnings, err)
		default:
			return err
		}
	}
	if missing != nil {
		return errExitOne
	}
	return nil
}
