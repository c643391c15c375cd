package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/dumpfile"
	"github.com/oncekv/oncekv/postgres"
)

// loadBatch is how many marks one transaction of load writes: few
// commits, and bounded memory whatever the size of the dump.
const loadBatch = 1000

// loader writes a dump's marks and counters into a store, in batches.
type loader struct {
	ctx   context.Context
	s     *postgres.Store
	marks []oncekv.MarkInfo

	read, loaded, claims, counters int
	userLines                      int // buckets, keys and fences of the embedded store's user data
}

// runLoad is "oncekv-pg load": it reads a dump (FILE, or standard input)
// into the schema, which must hold no mark yet: a load adds, and mixing
// two stores' keys would be a merge. A load that fails leaves the batches
// before the failure in place; drop the schema and run it again.
func runLoad(args []string, stdin io.Reader, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("dsn", os.Getenv("ONCEKV_PG_DSN"), "PostgreSQL DSN (default $ONCEKV_PG_DSN)")
	schema := fs.String("schema", postgres.DefaultSchema, "the store's schema, created if missing")
	retention := fs.Duration("retention", postgres.DefaultRetention, "the store's Retention: marks already expired by it are skipped")
	span := fs.Duration("span", 0, "the WindowSpan of a new schema (0: 24h, or the retention when shorter)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dsn == "" || fs.NArg() > 1 {
		return errUsage
	}
	in := stdin
	name := "standard input"
	if fs.NArg() == 1 && fs.Arg(0) != "-" {
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return err
		}
		defer f.Close()
		in, name = f, fs.Arg(0)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	s, err := postgres.Open(ctx, pool, postgres.Options{Schema: *schema, Retention: *retention, WindowSpan: *span, ExpireInterval: -1})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.Close()) }()
	if st, err := s.Storage(ctx); err != nil || st.Marks > 0 {
		if err == nil {
			err = fmt.Errorf("oncekv-pg: load: schema %q holds %d marks already; load into a new schema", *schema, st.Marks)
		}
		return err
	}
	l := &loader{ctx: ctx, s: s}
	r := dumpfile.NewReader(in)
	for {
		line, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil {
			err = l.add(line)
		}
		if err != nil {
			return fmt.Errorf("oncekv-pg: load: %s: %w", name, err)
		}
	}
	if err := l.flush(); err != nil {
		return fmt.Errorf("oncekv-pg: load: %s: %w", name, err)
	}
	fmt.Fprintf(stdout, "loaded %d marks of %d (%d expired skipped), raised %d token counters\n",
		l.loaded, l.read, l.read-l.loaded, l.counters)
	if l.claims > 0 {
		fmt.Fprintf(stderr, "oncekv-pg: warning: %d claims in progress not loaded: their keys will be applied afresh\n", l.claims)
	}
	if l.userLines > 0 {
		fmt.Fprintf(stderr, "oncekv-pg: warning: %d lines of user buckets not loaded: they are the embedded store's user data; "+
			"move them into your own tables\n", l.userLines)
	}
	return nil
}

func (l *loader) add(line *dumpfile.Line) error {
	switch line.Type {
	case dumpfile.TypeMark:
		if line.Mark.State == oncekv.MarkInProgress {
			l.claims++
			return nil
		}
		if l.marks = append(l.marks, line.Mark); len(l.marks) == loadBatch {
			return l.flush()
		}
	case dumpfile.TypeCounter:
		if err := l.s.RaiseCounter(l.ctx, line.Resource, line.Last); err != nil {
			return err
		}
		l.counters++
	default:
		l.userLines++
	}
	return nil
}

func (l *loader) flush() error {
	n, err := l.s.LoadMarks(l.ctx, l.marks)
	l.read += len(l.marks)
	l.loaded += n
	l.marks = l.marks[:0]
	return err
}
