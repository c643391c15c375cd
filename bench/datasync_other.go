//go:build !linux

package main

import "os"

// datasync is File.Sync off Linux (F_FULLFSYNC on macOS, FlushFileBuffers
// on Windows), as bbolt's commits are.
func datasync(f *os.File) error { return f.Sync() }
