package main

import (
	"context"
	"errors"
	"flag"
	"io"

	"github.com/oncekv/oncekv/queue"
)

func init() {
	register(&command{
		name: "dead-delete", short: "delete dead letters for good",
		args: "PATH QUEUE ID...", nargs: 3, moreArgs: true,
		summary: "Delete the dead letters ID... of QUEUE for good; the dead head of an ordering key lets\n" +
			"the key's next message through. Run it with the program stopped (or have the program call\n" +
			"queue.DeleteDead). Exit 1 if an ID is no dead letter (the others are deleted).",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.register(fs, false, false)
			return func(out io.Writer, args []string) error {
				return steerDead(&sf, out, args, "deleted", func(q *queue.Queue, id uint64) (string, error) {
					return "", q.DeleteDead(context.Background(), id)
				})
			}
		},
	})
}

// isNotFound reports whether err is a dead letter that is not there.
func isNotFound(err error) bool { return errors.Is(err, queue.ErrNotFound) }
