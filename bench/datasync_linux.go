package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync is fdatasync(2): what bbolt calls on Linux to make a commit
// durable.
func datasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
