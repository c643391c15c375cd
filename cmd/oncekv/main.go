// Command oncekv is the operator's tool for an oncekv store: it shows what a
// store file holds (stats, one mark, lists of marks and claims), releases a
// stuck claim, forgets a key, runs expiry, checks a file after a power cut,
// compacts, backs up, dumps and loads it. It works on a file that no process
// holds open, and opens it read-only for the commands that only read.
//
// Exit codes: 0 success, 1 not found or problems found, 2 usage or error.
// Run "oncekv help" for the commands, "oncekv COMMAND -h" for one. Example
// shows "oncekv mark"; docs/operating.md in the repository has every
// command and a session.
package main

import "os"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }
