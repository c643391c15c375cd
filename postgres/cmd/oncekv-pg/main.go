// Command oncekv-pg is the operator command of the PostgreSQL store
// (module oncekv/postgres). parked lists the keys a takeover's probe
// parked (Store.ClaimWith), and resolve settles one:
//
//	oncekv-pg parked -dsn "$DSN"
//	oncekv-pg resolve -dsn "$DSN" -applied -response rcpt-1 charge order-7
//	oncekv-pg resolve -dsn "$DSN" -not-applied charge order-8
//
// load moves the marks of an embedded store into a PostgreSQL schema:
//
//	oncekv dump orders.db > orders.jsonl
//	oncekv-pg load -dsn "$DSN" -schema oncekv < orders.jsonl
//
// Every key the embedded store had applied (DONE with its response, or
// FAILED with its error) stays a duplicate in PostgreSQL, with its
// first-seen time, so Retention counts from when it was really first
// seen; the token counters are raised to the embedded store's, so no token
// handed out before is handed out again.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// commands are the subcommands, by name.
var commands = map[string]func(args []string, stdin io.Reader, stdout, stderr io.Writer) error{
	"load":    runLoad,
	"parked":  runParked,
	"resolve": runResolve,
}

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if errors.Is(err, errUsage) || errors.Is(err, errResolveUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// errUsage is a command line that names no known subcommand.
var errUsage = errors.New("usage: oncekv-pg load -dsn DSN [-schema NAME] [-retention D] [FILE|-]\n" +
	"       oncekv-pg parked -dsn DSN [-schema NAME]\n" +
	"       oncekv-pg resolve -dsn DSN [-schema NAME] (-applied [-response TEXT] | -not-applied) HANDLER KEY")

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || commands[args[0]] == nil {
		return errUsage
	}
	return commands[args[0]](args[1:], stdin, stdout, stderr)
}
