// Command dupproxy is a reverse proxy for staging that sends a fraction of
// the requests it forwards twice and reports the routes whose second
// answer differs: the routes that are not idempotent, or that need an
// Idempotency-Key. See package dupproxy and docs/dupproxy.md.
//
//	dupproxy -upstream http://127.0.0.1:8080 -listen 127.0.0.1:8081 \
//		-fraction 0.05 -mode after -key both -mask '$.created_at'
//
// The report is served on -admin (/report, /report.json, /metrics) while
// it runs, and printed on stdout when it stops (SIGINT or SIGTERM), with
// -json FILE written then too.
//
// Exit status: 0 after a clean stop, 2 on bad usage or an error.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil))
}
