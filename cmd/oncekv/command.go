package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
)

// Exit codes, as grep has them: 0 found, 1 not found, 2 trouble.
const (
	exitOK       = 0 // success
	exitNotFound = 1 // the mark is absent, or check found problems
	exitError    = 2 // bad usage, or an error
)

// errExitOne ends a command with exitNotFound (the mark is absent, check
// found problems) after the command has printed why.
var errExitOne = errors.New("not found")

// usageError is a command line the command cannot run: exitError, with the
// command's usage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// command is one subcommand: its file is command_<name>.go.
type command struct {
	name    string
	args    string // the positional arguments, for the usage line
	short   string // one line, for the list of commands
	summary string // the description -h prints
	// flags registers the command's flags on fs and returns what runs it
	// once they are parsed: with the positional args, writing to out.
	flags func(fs *flag.FlagSet) func(out io.Writer, args []string) error
	nargs int // the number of positional arguments it takes
	// moreArgs: it takes nargs or more (IDs after a queue's name).
	moreArgs bool
}

// commands is every subcommand, by name.
var commands = map[string]*command{}

// register adds c to commands; each command_<verb>.go calls it from init.
func register(c *command) { commands[c.name] = c }

// run runs the command line args and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return exitError
		}
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "oncekv: unknown command %q\n", args[0])
		usage(stderr)
		return exitError
	}
	fs := flag.NewFlagSet("oncekv "+c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	do := c.flags(fs)
	printUsage := func() {
		fmt.Fprintf(fs.Output(), "usage: oncekv %s [flags] %s\n\n%s\n\nflags:\n", c.name, c.args, c.summary)
		fs.PrintDefaults()
	}
	fs.Usage = func() {} // parse's errors print the usage once, below
	pos, err := parse(fs, args[1:])
	fs.Usage = printUsage
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return exitOK
	case err != nil:
		fs.Usage() // flag has printed the problem
		return exitError
	case len(pos) != c.nargs && !(c.moreArgs && len(pos) > c.nargs):
		want := fmt.Sprint(c.nargs)
		if c.moreArgs {
			want = "at least " + want
		}
		fmt.Fprintf(stderr, "oncekv %s: want %s arguments (%s), got %d\n", c.name, want, c.args, len(pos))
		fs.Usage()
		return exitError
	}
	err = do(stdout, pos)
	for _, clean := range cleanups {
		clean()
	}
	cleanups = nil
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errExitOne):
		return exitNotFound
	case errors.Is(err, oncekv.ErrNotFound), errors.Is(err, queue.ErrNotFound), errors.Is(err, queue.ErrNoQueue):
		fmt.Fprintln(stderr, err)
		return exitNotFound
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "oncekv %s: %v\n", c.name, err)
		fs.Usage()
		return exitError
	}
	fmt.Fprintln(stderr, err)
	return exitError
}

// parse parses flags placed before, between or after the positional
// arguments, so that "oncekv marks app.db -handler pay" works as bbolt's
// users expect. After "--" everything is positional (a key that begins
// with "-").
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: oncekv COMMAND [flags] ARGS\n\ncommands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := commands[name]
		fmt.Fprintf(w, "  %-11s %-17s %s\n", name, c.args, c.short)
	}
	fmt.Fprintln(w, "\nRun \"oncekv COMMAND -h\" for a command's flags.\nExit codes: 0 ok, 1 not found or problems found, 2 usage or error.")
}

// exists reports whether path exists; only a clear "no" is false.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, os.ErrNotExist)
}
