package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/oncekv/oncekv/dupproxy"
)

// shutdownTimeout bounds the wait, at the end, for the requests being
// forwarded and the copies in flight.
const shutdownTimeout = 10 * time.Second

// list is a flag that may be given many times.
type list []string

func (l *list) String() string     { return strings.Join(*l, ", ") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

// config is the command line.
type config struct {
	listen, admin, jsonPath string
	verbose                 bool
	o                       dupproxy.Options
}

// parse reads the command line into a config, or says what was wrong.
func parse(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("dupproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: dupproxy -upstream URL [flags]\n\n"+
			"A reverse proxy for staging that sends a fraction of the requests twice and reports\n"+
			"the routes whose answers differ. Flags:\n\n")
		fs.PrintDefaults()
	}
	upstream := fs.String("upstream", "", "where to forward every request, e.g. http://127.0.0.1:8080 (required)")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8081", "address to serve the proxy on")
	fs.StringVar(&c.admin, "admin", "127.0.0.1:9464", "address to serve /report, /report.json and /metrics on (empty: none)")
	fs.StringVar(&c.jsonPath, "json", "", "write the JSON report to this file when stopping")
	fs.BoolVar(&c.verbose, "v", false, "log the copies that fail to reach the upstream")
	fs.Float64Var(&c.o.Fraction, "fraction", dupproxy.DefaultFraction, "share of the eligible requests that get a copy, in (0, 1]")
	var routes, methods, headers, masks list
	fs.Var(&routes, "route", `a route whose requests may be copied, as an http.ServeMux pattern ("POST /orders/{id}"); repeatable; default: every request of a -method`)
	fs.Var(&methods, "method", "a method copied when no -route is given; repeatable (default POST, PUT, PATCH, DELETE)")
	mode := fs.String("mode", "after", "when the copy goes: after (the answer), concurrent (with the original), delayed (-delay after the answer)")
	fs.DurationVar(&c.o.Delay, "delay", dupproxy.DefaultDelay, "how long after the answer a delayed copy goes")
	keys := fs.String("key", "keep", "the copy's Idempotency-Key: keep, strip, or both (two copies)")
	fs.StringVar(&c.o.KeyHeader, "key-header", dupproxy.DefaultKeyHeader, "the idempotency key's header")
	fs.Var(&headers, "compare-header", "a response header compared besides the status and body; repeatable")
	fs.Var(&masks, "mask", `a JSON path of a body field that may differ ("$.created_at", "$.items[*].id", "$..request_id"); repeatable`)
	fs.Int64Var(&c.o.MaxBody, "max-body", dupproxy.DefaultMaxBody, "bytes of a request body buffered for its copy, and of each answer compared")
	fs.IntVar(&c.o.MaxRoutes, "max-routes", dupproxy.DefaultMaxRoutes, "routes the report keeps apart")
	fs.IntVar(&c.o.MaxExamples, "max-examples", dupproxy.DefaultMaxExamples, "examples kept per route and kind of copy")
	fs.IntVar(&c.o.MaxInFlight, "max-inflight", dupproxy.DefaultMaxInFlight, "copies running at once")
	fs.BoolVar(&c.o.PreserveHost, "preserve-host", false, "send the client's Host header upstream")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("dupproxy: unexpected arguments %q", fs.Args())
	}
	var errs []error
	if *upstream == "" {
		errs = append(errs, errors.New("dupproxy: -upstream is required"))
	} else if u, err := url.Parse(*upstream); err != nil {
		errs = append(errs, fmt.Errorf("dupproxy: -upstream: %w", err))
	} else {
		c.o.Upstream = u
	}
	var err error
	if c.o.Mode, err = dupproxy.ParseMode(*mode); err != nil {
		errs = append(errs, err)
	}
	if c.o.Keys, err = dupproxy.ParseKeyMode(*keys); err != nil {
		errs = append(errs, err)
	}
	c.o.Routes, c.o.Methods, c.o.CompareHeaders, c.o.Mask = routes, methods, headers, masks
	return c, errors.Join(errs...)
}

// run is the command: it serves until ctx ends, then prints the report.
// ready, if set, is called with the proxy's and the admin's addresses
// once both listen ("" for no admin).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(proxy, admin string)) int {
	c, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if err := serve(ctx, c, stdout, stderr, ready); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	return 0
}

func serve(ctx context.Context, c *config, stdout, stderr io.Writer, ready func(proxy, admin string)) error {
	level := slog.LevelInfo
	if c.verbose {
		level = slog.LevelDebug
	}
	c.o.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	p, err := dupproxy.New(&c.o)
	if err != nil {
		return err
	}
	defer p.Close()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", c.listen)
	if err != nil {
		return fmt.Errorf("dupproxy: -listen: %w", err)
	}
	servers := []*http.Server{{Handler: p, ReadHeaderTimeout: 30 * time.Second}}
	listeners := []net.Listener{ln}
	adminAddr := ""
	if c.admin != "" {
		aln, err := lc.Listen(ctx, "tcp", c.admin)
		if err != nil {
			ln.Close()
			return fmt.Errorf("dupproxy: -admin: %w", err)
		}
		adminAddr = aln.Addr().String()
		servers = append(servers, &http.Server{Handler: p.Handler(), ReadHeaderTimeout: 30 * time.Second})
		listeners = append(listeners, aln)
	}
	errc := make(chan error, len(servers))
	for i, s := range servers {
		go func() { errc <- s.Serve(listeners[i]) }()
	}
	fmt.Fprintf(stderr, "dupproxy: forwarding http://%s to %s, copying %g%% of the requests (mode %s, key %s)\n",
		ln.Addr(), c.o.Upstream, 100*c.o.Fraction, c.o.Mode, c.o.Keys)
	if adminAddr != "" {
		fmt.Fprintf(stderr, "dupproxy: report on http://%s/report, /report.json and /metrics\n", adminAddr)
	}
	if ready != nil {
		ready(ln.Addr().String(), adminAddr)
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	stop, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(stop)
	}
	if err := p.Wait(stop); err != nil {
		fmt.Fprintf(stderr, "dupproxy: copies still in flight after %v: cancelled\n", shutdownTimeout)
	}
	r := p.Report()
	if err := r.WriteText(stdout); err != nil {
		return err
	}
	if c.jsonPath != "" {
		if err := writeJSON(c.jsonPath, &r); err != nil {
			return err
		}
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("dupproxy: %w", serveErr)
	}
	return nil
}

// writeJSON writes the report to path, whole or not at all.
func writeJSON(path string, r *dupproxy.Report) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("dupproxy: -json: %w", err)
	}
	err = r.WriteJSON(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("dupproxy: -json: %w", err)
	}
	return nil
}
