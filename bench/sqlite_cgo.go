//go:build cgo

package main

import (
	"errors"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// isSQLiteConstraint reports whether err is SQLite's constraint failure.
func isSQLiteConstraint(err error) bool {
	var e sqlite3.Error
	return errors.As(err, &e) && e.Code == sqlite3.ErrConstraint
}

// sqliteVersion is the linked SQLite library's version.
func sqliteVersion() string {
	v, _, _ := sqlite3.Version()
	return v
}
