package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/postgres"
)

// The parked keys of a schema (postgres.Store.ClaimWith's probe): parked
// lists them, resolve settles one, as `oncekv parked` and `oncekv
// resolve` do for a bbolt file.

// errResolveUsage is a resolve without its key or its verdict.
var errResolveUsage = errors.New("usage: oncekv-pg resolve -dsn DSN [-schema NAME] (-applied [-response TEXT] | -not-applied) HANDLER KEY")

// storeFlags are the flags that name a schema.
type storeFlags struct{ dsn, schema *string }

func schemaFlags(fs *flag.FlagSet) storeFlags {
	return storeFlags{
		dsn:    fs.String("dsn", os.Getenv("ONCEKV_PG_DSN"), "PostgreSQL DSN (default $ONCEKV_PG_DSN)"),
		schema: fs.String("schema", postgres.DefaultSchema, "the store's schema"),
	}
}

// open opens the store of the flags' schema, with no background expiry;
// the returned func closes it and its pool.
func (f storeFlags) open(ctx context.Context) (*postgres.Store, func() error, error) {
	if *f.dsn == "" {
		return nil, nil, errors.New("oncekv-pg: no -dsn (nor $ONCEKV_PG_DSN)")
	}
	pool, err := pgxpool.New(ctx, *f.dsn)
	if err != nil {
		return nil, nil, err
	}
	s, err := postgres.Open(ctx, pool, postgres.Options{Schema: *f.schema, ExpireInterval: -1})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return s, func() error { defer pool.Close(); return s.Close() }, nil
}

// runParked is "oncekv-pg parked": one row per parked key, with the
// attempt in doubt (its token and claim key, which the external system
// may have seen).
func runParked(args []string, _ io.Reader, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("parked", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sf := schemaFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return errUsage
	}
	ctx := context.Background()
	s, closeStore, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeStore()) }()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARKED AT\tTOKEN\tATTEMPT STARTED\tTAKEOVERS\tHANDLER\tKEY\tCLAIM KEY")
	n := 0
	err = s.Parked(ctx, func(m oncekv.MarkInfo) error {
		n++
		_, err := fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%s\n", stamp(m.ParkedAt), m.Token, stamp(m.AttemptStarted), m.Takeovers,
			strconv.Quote(m.Handler), strconv.Quote(m.Key), m.ClaimKey)
		return err
	})
	if err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintln(tw, "(no parked keys)")
	}
	return tw.Flush()
}

// runResolve is "oncekv-pg resolve": it settles one parked key, as
// applied (DONE with -response) or not applied (dropped: the next
// delivery runs it afresh).
func runResolve(args []string, _ io.Reader, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("resolve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sf := schemaFlags(fs)
	applied := fs.Bool("applied", false, "the attempt in doubt applied its effect: record the key DONE")
	notApplied := fs.Bool("not-applied", false, "it did not: drop the key's mark, for the next delivery to run it")
	response := fs.String("response", "", "with -applied, the response every duplicate gets")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 2 || *applied == *notApplied || (*notApplied && *response != "") {
		return errResolveUsage
	}
	handler, key := fs.Arg(0), fs.Arg(1)
	ctx := context.Background()
	s, closeStore, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeStore()) }()
	var resp []byte
	if *applied {
		resp = []byte(*response)
	}
	if err := s.ResolveParked(ctx, handler, key, *applied, resp); err != nil {
		return err
	}
	if *applied {
		fmt.Fprintf(stdout, "%s/%s: resolved as applied; its duplicates get the %d-byte response\n", handler, key, len(resp))
	} else {
		fmt.Fprintf(stdout, "%s/%s: resolved as not applied; the next delivery runs it afresh\n", handler, key)
	}
	return nil
}

// stamp prints t in UTC to the second, "-" for the zero time.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
