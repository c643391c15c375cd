//go:build !cgo

package main

// go-sqlite3 needs cgo: built without it (a cross-build, say), its driver
// fails every open, and these say so.

func isSQLiteConstraint(error) bool { return false }

func sqliteVersion() string { return "none: built without cgo, which go-sqlite3 needs" }
