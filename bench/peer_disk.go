package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
)

// diskStore is no store at all: each apply writes 4 KiB and, durable,
// fdatasyncs it. It measures how many durable commits this disk can do.
type diskStore struct {
	f    *os.File
	sync bool
	next atomic.Int64
	buf  []byte
}

const diskBlock = 4096
const diskSlots = 1024 // the loop cycles over 4 MiB, so the file stays allocated

func openDisk(c storeConfig) (store, error) {
	f, err := os.OpenFile(filepath.Join(c.dir, "disk.dat"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	// Allocate up front: the loop measures overwrites, not file growth.
	if err := f.Truncate(diskBlock * diskSlots); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	if err := datasync(f); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	return &diskStore{f: f, sync: c.sync, buf: make([]byte, diskBlock)}, nil
}

func (s *diskStore) apply(_ context.Context, r *request) outcome {
	slot := s.next.Add(1) % diskSlots
	if _, err := s.f.WriteAt(s.buf, slot*diskBlock); err != nil {
		return outcome{err: err}
	}
	if s.sync {
		if err := datasync(s.f); err != nil {
			return outcome{err: err}
		}
	}
	return outcome{response: r.response}
}

func (s *diskStore) effectCount(string) (uint64, error) { return 0, nil }
func (s *diskStore) close() error                       { return s.f.Close() }
