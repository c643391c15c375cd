// Command kvdemo shows what oncekv is for: a message delivered many times
// has its effect applied once.
//
// Usage:
//
//	kvdemo demo    [-db PATH] [-keep]   run the scripted story
//	kvdemo inspect [-db PATH]           print the user buckets of a store
//
// The demo writes kvdemo.db in the current directory unless -db says
// otherwise. It starts from a fresh file, and deletes the old one first only
// when that file is an oncekv database: any other file is left alone.
//
// Exit status: 0 on success, 1 on an error or a failed check, 2 on bad usage.
// Example runs both commands. command_demo.go runs the story and checks
// each step; its later chapters (the dedup window, fencing, the queue, the
// outbox) are story_*.go, one file each.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// errUsage reports bad usage; the usage text has already been printed.
var errUsage = errors.New("usage")

// defaultDBPath is where the demo keeps its store unless -db says otherwise.
const defaultDBPath = "kvdemo.db"

const usage = `kvdemo shows oncekv's effectively-once processing on a small bank.

Usage:

	kvdemo <command> [flags]

Commands:

	demo     run the scripted story (retry storm, key reuse, failures, reopen)
	inspect  print the user buckets, key counts and balances of a store

Run "kvdemo <command> -h" for a command's flags.
`

// command runs one subcommand with its arguments (the command name removed).
type command func(args []string, stdout, stderr io.Writer) error

var commands = map[string]command{
	"demo":    runDemo,
	"inspect": runInspect,
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches args to a subcommand and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "kvdemo: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch err := cmd(args[1:], stdout, stderr); {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(stderr, "kvdemo %s: %v\n", args[0], err)
		return 1
	}
}

// parseFlags parses a subcommand's flags, which take no positional
// arguments. Bad flags print the flag set's usage and return errUsage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return err
	case err != nil:
		return errUsage // the flag package has printed the problem and usage
	case fs.NArg() > 0:
		fmt.Fprintf(fs.Output(), "kvdemo %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}
