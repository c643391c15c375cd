package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// request is one delivery, the unit of the protocol every peer implements.
type request struct {
	handler, key string
	payload      []byte
	response     []byte // what the effect returns, stored with the mark
}

// outcome is one request's result.
type outcome struct {
	response  []byte
	duplicate bool
	err       error
}

// The protocol's answers other than success.
var (
	errKeyReuse   = errors.New("bench: key reused with another payload")
	errInProgress = errors.New("bench: key in progress")
)

// store is what every peer implements: effect and mark in one transaction,
// a duplicate answered with the stored response without running the effect,
// another payload under the same key rejected with errKeyReuse. Peers
// without dedup (the floors) run the effect every time.
type store interface {
	apply(ctx context.Context, r *request) outcome
	// effectCount returns how many times key's effect was applied.
	effectCount(key string) (uint64, error)
	close() error
}

// batcher is implemented by peers with a batch form: many requests, one
// transaction, one commit.
type batcher interface {
	applyBatch(ctx context.Context, rs []request) ([]outcome, error)
}

// sizer is implemented by peers whose bytes on disk are not simply their
// directory's (a server).
type sizer interface {
	diskBytes() (int64, error)
}

// commitCounter is implemented by the oncekv peers: their commit counters,
// so that a cell can report requests and bytes written per commit.
type commitCounter interface {
	commitCounts() commitCounts
}

// commitCounts are a store's commit counters at one instant, or (after
// sub) over one run.
type commitCounts struct {
	commits    uint64        // write transactions committed
	took       time.Duration // their total time, fsync included
	markTxs    uint64        // those that wrote marks
	marks      uint64        // the marks they wrote
	freelist   int           // bytes of the freelist bbolt writes with each commit (a gauge)
	pageSize   int
	liveMarks  uint64 // a gauge
	windowsNow int    // live windows (a gauge)
}

func (a commitCounts) sub(b commitCounts) commitCounts {
	a.commits -= b.commits
	a.took -= b.took
	a.markTxs -= b.markTxs
	a.marks -= b.marks
	return a
}

// storeConfig is what a peer is opened with.
type storeConfig struct {
	dir       string
	sync      bool
	bloom     bool
	span      time.Duration
	retention time.Duration
	pgDSN     string
	now       func() time.Time // oncekv's clock; nil is time.Now
}

// peer names an implementation and opens a fresh store of it.
type peer struct {
	name  string
	dedup bool   // false: a floor that writes the effect only
	note  string // one line for the report
	open  func(c storeConfig) (store, error)
}

var allPeers = []peer{
	{"disk", false, "4 KiB pwrite + fdatasync loop: the commits this disk can do", openDisk},
	{"bbolt", false, "raw bbolt, effect only: the floor", openBbolt},
	{"oncekv", true, "Apply (ApplyBatch in the batch column)", openOncekv(true)},
	{"oncekv-nobloom", true, "Apply with the Bloom filter off", openOncekv(false)},
	{"sqlite-full", true, "WAL, synchronous=FULL (sync off: OFF)", openSQLite("FULL")},
	{"sqlite-normal", true, "WAL, synchronous=NORMAL: not durable on power loss", openSQLite("NORMAL")},
	{"badger", true, "Badger v4, marks with a TTL", openBadger},
	{"postgres", true, "article protocol: INSERT IN_PROGRESS, effect, DONE; SELECT on conflict", openPostgres},
	{"oncekv-pg", true, "oncekv's PostgreSQL store (postgres/): Apply (ApplyBatch in the batch column)", openOncekvPG},
}

func findPeer(name string) *peer {
	for i := range allPeers {
		if allPeers[i].name == name {
			return &allPeers[i]
		}
	}
	return nil
}

const (
	stateInProgress = "IN_PROGRESS"
	stateDone       = "DONE"
	effectSize      = 64
)

// nextEffect is the effect's one 64-byte value: a count of applications,
// so that a test can tell an effect that ran twice, and the payload's
// first bytes.
func nextEffect(prev, payload []byte) []byte {
	v := make([]byte, effectSize)
	var n uint64
	if len(prev) >= 8 {
		n = binary.BigEndian.Uint64(prev)
	}
	binary.BigEndian.PutUint64(v, n+1)
	copy(v[8:], payload)
	return v
}

func effectCountOf(v []byte) uint64 {
	if len(v) < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

// decide answers a request from a stored mark, for the peers that keep the
// mark's fields themselves.
func decide(r *request, state string, hash, response []byte) outcome {
	h := sha256.Sum256(r.payload)
	switch {
	case !bytes.Equal(hash, h[:]):
		return outcome{err: errKeyReuse}
	case state != stateDone:
		return outcome{err: errInProgress}
	}
	return outcome{response: bytes.Clone(response), duplicate: true}
}

// mark is the record of a (handler, key) for the key-value peers, with the
// fields of the article's processed_messages row.
type mark struct {
	state      string
	hash       []byte
	response   []byte
	leaseUntil int64
	createdAt  int64
}

// encode lays a mark out as state length, state, hash, lease, created,
// response.
func (m *mark) encode() []byte {
	b := make([]byte, 0, 1+len(m.state)+sha256.Size+16+len(m.response))
	b = append(b, byte(len(m.state)))
	b = append(b, m.state...)
	b = append(b, m.hash...)
	b = binary.BigEndian.AppendUint64(b, uint64(m.leaseUntil))
	b = binary.BigEndian.AppendUint64(b, uint64(m.createdAt))
	return append(b, m.response...)
}

func decodeMark(b []byte) (mark, error) {
	var m mark
	if len(b) < 1 || len(b) < 1+int(b[0])+sha256.Size+16 {
		return m, fmt.Errorf("bench: short mark (%d bytes)", len(b))
	}
	n := 1 + int(b[0])
	m.state = string(b[1:n])
	m.hash = b[n : n+sha256.Size]
	n += sha256.Size
	m.leaseUntil = int64(binary.BigEndian.Uint64(b[n:]))
	m.createdAt = int64(binary.BigEndian.Uint64(b[n+8:]))
	m.response = b[n+16:]
	return m, nil
}

func doneMark(r *request) mark {
	h := sha256.Sum256(r.payload)
	return mark{state: stateDone, hash: h[:], response: r.response, createdAt: time.Now().UnixNano()}
}

// applyEach is the batch form of peers whose batch is a loop of single
// requests inside one transaction.
func applyEach(rs []request, one func(r *request) (outcome, error)) ([]outcome, error) {
	out := make([]outcome, len(rs))
	for i := range rs {
		o, err := one(&rs[i])
		if err != nil {
			return nil, err
		}
		out[i] = o
	}
	return out, nil
}
