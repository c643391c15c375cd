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
		name: "resolve", short: "settle a parked key: applied, or not applied",
		args: "PATH HANDLER KEY", nargs: 3,
		summary: "Settle the parked key (HANDLER, KEY) once you know what its attempt in doubt did\n" +
			"(ask the external system about the claim key and token that oncekv parked shows):\n" +
			"-applied records it DONE with -response (or -response-file), as the attempt's\n" +
			"Complete would have, and every later delivery is a duplicate; -not-applied drops\n" +
			"it, and the next delivery runs it afresh. Exit 1 when the key has no mark.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.register(fs, false, false)
			var applied, notApplied bool
			var response, responseFile string
			fs.BoolVar(&applied, "applied", false, "the effect happened: record the key DONE")
			fs.BoolVar(&notApplied, "not-applied", false, "the effect did not happen: let the next delivery run it")
			fs.StringVar(&response, "response", "", "with -applied, the response duplicates get")
			fs.StringVar(&responseFile, "response-file", "", "with -applied, a file holding the response (any bytes)")
			return func(out io.Writer, args []string) error {
				var resp []byte
				switch {
				case applied == notApplied:
					return &usageError{"give one of -applied and -not-applied"}
				case notApplied && (response != "" || responseFile != ""):
					return &usageError{"-response and -response-file go with -applied"}
				case response != "" && responseFile != "":
					return &usageError{"give -response or -response-file, not both"}
				case responseFile != "":
					b, err := os.ReadFile(responseFile)
					if err != nil {
						return fmt.Errorf("oncekv resolve: %w", err)
					}
					resp = b
				case applied:
					resp = []byte(response)
				}
				return runResolve(&sf, out, args, applied, resp)
			}
		},
	})
}

func runResolve(sf *storeFlags, out io.Writer, args []string, applied bool, response []byte) (err error) {
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
	case m.State != oncekv.MarkParked:
		return fmt.Errorf("%w: resolve: %s/%s is %v", oncekv.ErrNotParked, handler, key, m.State)
	}
	if err := db.ResolveParked(handler, key, applied, response); err != nil {
		return err
	}
	if applied {
		fmt.Fprintf(out, "%s/%s: resolved as applied (the attempt with token %d); its duplicates get the %d-byte response\n",
			handler, key, m.Token, len(response))
		return nil
	}
	fmt.Fprintf(out, "%s/%s: resolved as not applied (the attempt with token %d); the next delivery runs it afresh\n",
		handler, key, m.Token)
	return nil
}
