// Command oncekv is the operator's tool for an oncekv store: it shows what a
// store file holds (stats, one mark, lists of marks and claims, queues with
// their live messages and dead letters, the HTTP record of a client's
// Idempotency-Key), releases a stuck claim, forgets a key, redrives or
// deletes dead letters, runs expiry, checks a file after a power cut,
// compacts, backs up, dumps and loads it. It works on a file that no
// process holds open, and opens it read-only for the commands that only
// read; those also take the URL of a running program's admin handler
// (package admin) for PATH, and read a consistent copy fetched from it.
//
// Exit codes: 0 success, 1 not found or problems found, 2 usage or error.
// Run "oncekv help" for the commands, "oncekv COMMAND -h" for one. Example
// shows "oncekv mark"; docs/operating.md in the repository has every
// command and a session.
package main

import "os"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }
