package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
)

func init() {
	register(&command{
		name: "check", short: "check the file and every system record",
		args: "PATH", nargs: 1,
		summary: "Check the file: bbolt's consistency check, then every system record's checksum and\n" +
			"decoding (marks, filters, leases, fences, metadata), naming the bucket and key of each\n" +
			"problem, then every queue's records and counts. Exit 1 on any problem. PATH may be an\n" +
			"admin handler's URL.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.register(fs, true, false)
			return func(out io.Writer, args []string) error { return runCheck(&sf, out, args[0]) }
		},
	})
}

// checkQueues checks every queue of db (queue.View.Check): its records,
// and its counts against a scan.
func checkQueues(db *oncekv.DB, report func(error) error) error {
	names, err := queue.Names(db)
	if err != nil {
		return report(err)
	}
	for _, name := range names {
		v, err := queue.NewView(db, name)
		if err != nil {
			if err := report(err); err != nil {
				return err
			}
			continue
		}
		if err := v.Check(report); err != nil {
			return err
		}
	}
	return nil
}

type problemJSON struct {
	Bucket string `json:"bucket,omitempty"`
	Key    string `json:"key,omitempty"`
	Error  string `json:"error"`
}

func runCheck(sf *storeFlags, out io.Writer, path string) (err error) {
	n := 0
	report := func(p error) error {
		n++
		j := problemJSON{Error: p.Error()}
		var re *oncekv.RecordError
		if errors.As(p, &re) {
			j = problemJSON{Bucket: re.Bucket, Key: re.Key, Error: re.Err.Error()}
		}
		if sf.json {
			return writeJSON(out, j)
		}
		if j.Bucket != "" {
			_, err := fmt.Fprintf(out, "bucket %q key %q: %s\n", j.Bucket, j.Key, j.Error)
			return err
		}
		_, err := fmt.Fprintln(out, j.Error)
		return err
	}
	db, err := sf.open(path, true)
	switch {
	case errors.Is(err, oncekv.ErrCorrupt) || errors.Is(err, oncekv.ErrNotOncekv):
		// The store does not open: that is the problem found.
		if err := report(err); err != nil {
			return err
		}
		return errExitOne
	case err != nil:
		return err
	}
	defer closeInto(db, &err)
	if err := db.Check(report); err != nil {
		return err
	}
	if err := checkQueues(db, report); err != nil {
		return err
	}
	if n > 0 {
		if !sf.json {
			fmt.Fprintf(out, "%d problems found\n", n)
		}
		return errExitOne
	}
	if !sf.json {
		fmt.Fprintln(out, "ok")
	}
	return nil
}
