// Command bench measures what deduplication costs: oncekv side by side with
// the stores a user would pick instead, on one protocol (effect and mark in
// one transaction; a duplicate gets the stored response; another payload
// under the same key is rejected). See README.md.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "queue" {
		if err := runQueueBench(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench queue:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "commitsplit" {
		if err := commitSplitMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench commitsplit:", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:])
	switch {
	case err != nil:
	case cfg.plateau.run:
		err = plateauMain(cfg)
	default:
		err = runSuite(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
