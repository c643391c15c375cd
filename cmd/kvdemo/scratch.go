package main

import (
	"os"
	"path/filepath"
	"time"

	"github.com/oncekv/oncekv"
)

// withScratchStore runs fn on a store of its own in a temporary directory,
// on a fake clock that starts at 09:00, so a story can move time at will
// without touching the demo's file. The directory is removed afterwards.
func withScratchStore(name string, opts oncekv.Options, fn func(db *oncekv.DB, clock *fakeClock) error) error {
	dir, err := os.MkdirTemp("", "kvdemo-"+name)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	clock := &fakeClock{now: time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)}
	opts.Now = clock.Now
	db, err := oncekv.Open(filepath.Join(dir, name+".db"), &opts)
	if err != nil {
		return err
	}
	defer db.Close()
	return fn(db, clock)
}

// fakeClock is a story's clock: it moves only when the story moves it. A
// story runs on one goroutine, so it needs no lock.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time      { return c.now }
func (c *fakeClock) Set(t time.Time)     { c.now = t }
func (c *fakeClock) Add(d time.Duration) { c.now = c.now.Add(d) }
