package main

import (
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/oncekv/oncekv"
)

// runInspect is the inspect subcommand: it prints the user buckets of an
// existing store with their key counts, and the balances of the bank.
func runInspect(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("db", defaultDBPath, "database `file` to inspect; it must exist")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: kvdemo inspect [-db PATH]\n\nPrints the user buckets of a store, their key counts and the bank's balances.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}

	db, err := openExisting(*path)
	if err != nil {
		return err
	}
	defer db.Close()

	// Marks live in system buckets, out of a Tx's reach: only user buckets
	// are listed.
	fmt.Fprintf(stdout, "store %s\n\n", *path)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	err = db.View(func(tx *oncekv.Tx) error {
		fmt.Fprintln(tw, "bucket\tkeys")
		if err := tx.ForEachBucket(func(name []byte) error {
			n, err := countKeys(tx.Bucket(name))
			fmt.Fprintf(tw, "%q\t%d\n", name, n)
			return err
		}); err != nil {
			return err
		}
		bank := tx.Bucket(bankBucket)
		if bank == nil {
			return nil
		}
		fmt.Fprintf(tw, "\naccount\tbalance\n")
		return bank.ForEach(func(k, v []byte) error {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
			return nil
		})
	})
	if err != nil {
		return err
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return db.Close()
}

// countKeys counts the keys of b by walking it: fine for a demo's buckets.
func countKeys(b *oncekv.Bucket) (n int, err error) {
	err = b.ForEach(func(_, _ []byte) error {
		n++
		return nil
	})
	return n, err
}
