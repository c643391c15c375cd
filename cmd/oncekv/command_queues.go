package main

import (
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/oncekv/oncekv/internal/dumpfile"
	"github.com/oncekv/oncekv/queue"
)

func init() {
	register(&command{
		name: "queues", short: "each queue: depth, ready, in flight, delayed, dead, ages",
		args: "PATH", nargs: 1,
		summary: "Show each queue of the store: live messages (ready, in flight, delayed, waiting behind\n" +
			"an earlier message of their ordering key), dead letters, bytes held, how long the oldest\n" +
			"visible message has waited and how old the oldest live one is; with -by-key, its ordering\n" +
			"keys too (a key held by a dead letter says so). PATH may be an admin handler's URL.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.register(fs, true, false)
			var byKey bool
			var limit int
			fs.BoolVar(&byKey, "by-key", false, "list each queue's ordering keys too")
			fs.IntVar(&limit, "limit", 100, "with -by-key: at most this many keys a queue")
			return func(out io.Writer, args []string) error {
				if limit <= 0 {
					return &usageError{fmt.Sprintf("-limit %d: must be positive", limit)}
				}
				return runQueues(&sf, out, args[0], byKey, limit)
			}
		},
	})
}

func runQueues(sf *storeFlags, out io.Writer, path string, byKey bool, limit int) (err error) {
	db, err := sf.open(path, true)
	if err != nil {
		return err
	}
	defer closeInto(db, &err)
	names, err := queue.Names(db)
	if err != nil {
		return err
	}
	var list []dumpfile.Queue
	for _, name := range names {
		v, err := queue.NewView(db, name)
		if err != nil {
			return err
		}
		st, err := v.Stats()
		if err != nil {
			return err
		}
		j := dumpfile.QueueOf(name, st)
		if byKey {
			keys, err := v.OrderingKeys("", limit)
			if err != nil {
				return err
			}
			for _, k := range keys {
				j.Keys = append(j.Keys, dumpfile.OrderingKeyOf(k))
			}
		}
		list = append(list, j)
	}
	if sf.json {
		for _, j := range list {
			if err := writeJSON(out, j); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tDEPTH\tREADY\tIN FLIGHT\tDELAYED\tWAITING\tDEAD\tBYTES\tOLDEST VISIBLE\tOLDEST")
	for _, j := range list {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", j.Name, j.Depth, j.Ready, j.InFlight, j.Delayed,
			j.Waiting, j.Dead, j.Bytes, age(seconds(j.OldestVisibleAge)), age(seconds(j.OldestAge)))
	}
	if byKey {
		for _, j := range list {
			fmt.Fprintf(tw, "\n%s ordering keys (%d)\n", j.Name, len(j.Keys))
			fmt.Fprintln(tw, "  KEY\tMESSAGES\tHEAD\tSTATE")
			for _, k := range j.Keys {
				state := "flowing"
				if k.Held {
					state = fmt.Sprintf("held by dead letter %d (redrive or dead-delete it)", k.Head)
				}
				fmt.Fprintf(tw, "  %s\t%d\t%d\t%s\n", printable(k.Key), k.Messages, k.Head, state)
			}
		}
	}
	return tw.Flush()
}
