package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"maragu.dev/goqite"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
)

// The queue suite: `bench queue [flags]` measures oncekv's queue side by
// side with goqite on SQLite (WAL, synchronous=FULL), both durable: every
// commit is fsynced.

type queueConfig struct {
	dir     string
	n       int // messages per cell
	batch   int
	shallow int // queued messages for the small side of the depth cell
	deep    int // and for the large side
	e2e     int // messages of the end-to-end latency cell
	cells   string
	out     string // directory for queue.png; none when empty
	rounds  int    // runs of each cell per peer, medians reported
}

func parseQueueFlags(args []string) (queueConfig, error) {
	c := queueConfig{}
	fs := flag.NewFlagSet("bench queue", flag.ContinueOnError)
	fs.StringVar(&c.dir, "dir", "", "directory for the stores (default: a temporary one)")
	fs.IntVar(&c.n, "n", 2000, "messages per throughput cell")
	fs.IntVar(&c.batch, "batch", 100, "messages per transaction in the batch cell")
	fs.IntVar(&c.shallow, "shallow", 1000, "messages queued in the small depth cell")
	fs.IntVar(&c.deep, "deep", 1000000, "messages queued in the large depth cell")
	fs.IntVar(&c.e2e, "e2e", 300, "messages of the end-to-end latency cell")
	fs.StringVar(&c.cells, "cells", "enqueue,batch,receive,steady,e2e,depth", "the cells to run, comma-separated")
	fs.IntVar(&c.rounds, "rounds", 1, "runs of each cell, alternating which peer goes first; the medians are reported")
	fs.StringVar(&c.out, "out", "", "directory to write the chart queue.png to (default: no chart)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.rounds < 1 {
		return c, fmt.Errorf("-rounds %d: want at least 1", c.rounds)
	}
	return c, nil
}

// queuePeer is one queue implementation under test.
type queuePeer interface {
	enqueue(ctx context.Context, key string, body []byte) error
	enqueueBatch(ctx context.Context, keys []string, body []byte) error
	// receiveAck receives one visible message and acks it, and reports
	// false when none was visible.
	receiveAck(ctx context.Context) (bool, error)
	// receiveWait blocks until a message is received, then acks it.
	receiveWait(ctx context.Context) error
	// lease receives one message, which must be visible, and returns it.
	lease(ctx context.Context) (any, error)
	// ackLease acks m, a message lease returned, and leases the next,
	// which must be visible: in one commit where the queue can (oneTx
	// asks goqite for its DeleteTx and ReceiveTx in one transaction).
	ackLease(ctx context.Context, m any, oneTx bool) (any, error)
	// ack acks m, a message lease returned.
	ack(ctx context.Context, m any) error
	// consumeLoop receives until ctx is done, blocking when the queue is
	// empty, and calls got at each message before it acks it.
	consumeLoop(ctx context.Context, got func()) error
	// commits counts the store's commits so far (false: not known).
	commits() (uint64, bool)
	close() error
}

// oncekvQueue is oncekv's queue, durable.
type oncekvQueue struct {
	db *oncekv.DB
	q  *queue.Queue
}

func openOncekvQueue(dir string, sync bool) (queuePeer, error) {
	db, err := oncekv.Open(filepath.Join(dir, "oncekv.db"), &oncekv.Options{NoSync: !sync})
	if err != nil {
		return nil, err
	}
	q, err := queue.Open(db, "bench", nil)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return &oncekvQueue{db: db, q: q}, nil
}

func (o *oncekvQueue) enqueue(ctx context.Context, key string, body []byte) error {
	_, err := o.q.Enqueue(ctx, queue.Message{Key: key, Body: body})
	return err
}

func (o *oncekvQueue) enqueueBatch(ctx context.Context, keys []string, body []byte) error {
	return o.db.Update(func(tx *oncekv.Tx) error {
		for _, k := range keys {
			if _, err := o.q.EnqueueTx(tx, queue.Message{Key: k, Body: body}); err != nil {
				return err
			}
		}
		return nil
	})
}

func (o *oncekvQueue) receiveAck(ctx context.Context) (bool, error) {
	ms, err := o.q.Poll(ctx, 1)
	if err != nil || len(ms) == 0 {
		return false, err
	}
	return true, o.q.Ack(ctx, ms[0])
}

func (o *oncekvQueue) receiveWait(ctx context.Context) error {
	m, err := o.q.Receive(ctx)
	if err != nil {
		return err
	}
	return o.q.Ack(ctx, m)
}

func (o *oncekvQueue) lease(ctx context.Context) (any, error) {
	ms, err := o.q.Poll(ctx, 1)
	if err == nil && len(ms) == 0 {
		err = errors.New("no visible message")
	}
	if err != nil {
		return nil, err
	}
	return ms[0], nil
}

// ackLease is AckAndReceive: always one commit.
func (o *oncekvQueue) ackLease(ctx context.Context, m any, _ bool) (any, error) {
	return o.q.AckAndReceive(ctx, m.(*queue.Message))
}

func (o *oncekvQueue) ack(ctx context.Context, m any) error { return o.q.Ack(ctx, m.(*queue.Message)) }

// consumeLoop is a steady consumer: each ack leases the next message in
// its commit, and waits (woken by the enqueue's commit) when none is.
func (o *oncekvQueue) consumeLoop(ctx context.Context, got func()) error {
	m, err := o.q.Receive(ctx)
	for err == nil {
		got()
		m, err = o.q.AckAndReceive(ctx, m)
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (o *oncekvQueue) commits() (uint64, bool) { return o.db.Stats().Commits, true }

func (o *oncekvQueue) close() error {
	_ = o.q.Close()
	return o.db.Close()
}

// goqiteQueue is goqite on SQLite in WAL mode.
type goqiteQueue struct {
	db *sql.DB
	q  *goqite.Queue
}

// goqiteSchema reads goqite's own schema file from the module cache, where
// `go mod download` put it.
func goqiteSchema() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "maragu.dev/goqite").Output()
	if err != nil {
		return "", fmt.Errorf("locate goqite's schema: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "schema_sqlite.sql"))
	return string(b), err
}

func openGoqite(dir string, sync bool) (queuePeer, error) {
	mode := "FULL"
	if !sync {
		mode = "OFF"
	}
	dsn := fmt.Sprintf("file:%s?_journal_mode=WAL&_synchronous=%s&_busy_timeout=30000&_txlock=immediate",
		filepath.Join(dir, "goqite.db"), mode)
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(8)
	schema, err := goqiteSchema()
	if err == nil {
		_, err = db.Exec(schema)
	}
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		_ = db.Close()
		return nil, err
	}
	return &goqiteQueue{db: db, q: goqite.New(goqite.NewOpts{DB: db, Name: "bench", MaxReceive: 10, Timeout: 30 * time.Second})}, nil
}

func (g *goqiteQueue) enqueue(ctx context.Context, _ string, body []byte) error {
	return g.q.Send(ctx, goqite.Message{Body: body})
}

func (g *goqiteQueue) enqueueBatch(ctx context.Context, keys []string, body []byte) error {
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	for range keys {
		if err := g.q.SendTx(ctx, tx, goqite.Message{Body: body}); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}

func (g *goqiteQueue) receiveAck(ctx context.Context) (bool, error) {
	m, err := g.q.Receive(ctx)
	if err != nil || m == nil {
		return false, err
	}
	return true, g.q.Delete(ctx, m.ID)
}

// receiveWait polls every millisecond: goqite has no wake-up on send.
func (g *goqiteQueue) receiveWait(ctx context.Context) error {
	m, err := g.q.ReceiveAndWait(ctx, time.Millisecond)
	if err != nil {
		return err
	}
	return g.q.Delete(ctx, m.ID)
}

func (g *goqiteQueue) lease(ctx context.Context) (any, error) {
	m, err := g.q.Receive(ctx)
	if err == nil && m == nil {
		err = errors.New("no visible message")
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// ackLease deletes m and receives the next: two commits, or one
// transaction of DeleteTx and ReceiveTx with oneTx.
func (g *goqiteQueue) ackLease(ctx context.Context, m any, oneTx bool) (any, error) {
	if !oneTx {
		if err := g.ack(ctx, m); err != nil {
			return nil, err
		}
		return g.lease(ctx)
	}
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	var next *goqite.Message
	err = g.q.DeleteTx(ctx, tx, m.(*goqite.Message).ID)
	if err == nil {
		next, err = g.q.ReceiveTx(ctx, tx)
	}
	if err == nil && next == nil {
		err = errors.New("no visible message")
	}
	if err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	return next, tx.Commit()
}

func (g *goqiteQueue) ack(ctx context.Context, m any) error {
	return g.q.Delete(ctx, m.(*goqite.Message).ID)
}

// consumeLoop polls every millisecond when the queue is empty: goqite has
// no wake-up on send.
func (g *goqiteQueue) consumeLoop(ctx context.Context, got func()) error {
	for {
		m, err := g.q.ReceiveAndWait(ctx, time.Millisecond)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		got()
		if err := g.q.Delete(ctx, m.ID); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

func (g *goqiteQueue) commits() (uint64, bool) { return 0, false }

func (g *goqiteQueue) close() error { return g.db.Close() }

var queuePeers = []struct {
	name string
	open func(dir string, sync bool) (queuePeer, error)
}{
	{"oncekv", openOncekvQueue},
	{"goqite", openGoqite},
}

// runQueueBench runs every cell for every peer and prints a table.
func runQueueBench(args []string) (err error) {
	c, err := parseQueueFlags(args)
	if err != nil {
		return err
	}
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "bench-queue"); err != nil {
			return err
		}
		defer os.RemoveAll(c.dir)
	}
	ctx := context.Background()
	body := make([]byte, 256)
	fmt.Printf("queue suite: %d messages per cell, %d-byte bodies, durable (fsync per commit), median of %d rounds\n", c.n, len(body), c.rounds)
	fmt.Printf("%-40s %14s %14s %8s\n", "cell", "oncekv", "goqite", "oncekv/goqite")
	var rows []queueRow
	row := func(cell, name, unit string, f func(p queuePeer, dir string) (float64, error)) error {
		if !slices.Contains(strings.Split(c.cells, ","), cell) {
			return nil
		}
		// Rounds alternate which peer runs first; each peer's median is
		// reported.
		all := make([][]float64, len(queuePeers))
		for r := range c.rounds {
			for j := range queuePeers {
				i := (j + r) % len(queuePeers)
				peer := queuePeers[i]
				dir, err := os.MkdirTemp(c.dir, peer.name)
				if err != nil {
					return err
				}
				p, err := peer.open(dir, true)
				if err != nil {
					return fmt.Errorf("%s: %w", peer.name, err)
				}
				v, err := f(p, dir)
				cerr := p.close()
				_ = os.RemoveAll(dir)
				if err = errors.Join(err, cerr); err != nil {
					return fmt.Errorf("%s %s: %w", peer.name, name, err)
				}
				all[i] = append(all[i], v)
			}
		}
		var vals []float64
		for _, vs := range all {
			slices.Sort(vs)
			vals = append(vals, vs[len(vs)/2])
		}
		fmt.Printf("%-40s %10.0f %-3s %10.0f %-3s %7.2fx\n", name, vals[0], unit, vals[1], unit, vals[0]/vals[1])
		rows = append(rows, queueRow{name: name, latency: unit == "µs", oncekv: vals[0], goqite: vals[1]})
		return nil
	}
	defer func() {
		if c.out != "" && err == nil && len(rows) > 0 {
			err = queueChart(rows, filepath.Join(c.out, "queue.png"))
		}
	}()
	for _, w := range []int{1, 8} {
		if err := row("enqueue", fmt.Sprintf("enqueue, %d producers", w), "/s", func(p queuePeer, _ string) (float64, error) {
			return parallel(c.n, w, func(i int) error { return p.enqueue(ctx, fmt.Sprint("k", i), body) })
		}); err != nil {
			return err
		}
	}
	if err := row("batch", fmt.Sprintf("enqueue, batches of %d", c.batch), "/s", func(p queuePeer, _ string) (float64, error) {
		start := time.Now()
		for i := 0; i < c.n; i += c.batch {
			keys := make([]string, 0, c.batch)
			for j := i; j < min(i+c.batch, c.n); j++ {
				keys = append(keys, fmt.Sprint("k", j))
			}
			if err := p.enqueueBatch(ctx, keys, body); err != nil {
				return 0, err
			}
		}
		return float64(c.n) / time.Since(start).Seconds(), nil
	}); err != nil {
		return err
	}
	for _, w := range []int{1, 8} {
		if err := row("receive", fmt.Sprintf("receive+ack, %d consumers", w), "/s", func(p queuePeer, _ string) (float64, error) {
			if err := fillQueue(ctx, p, c.n, c.batch, body); err != nil {
				return 0, err
			}
			return parallel(c.n, w, func(int) error {
				ok, err := p.receiveAck(ctx)
				if err == nil && !ok {
					err = errors.New("queue empty too early")
				}
				return err
			})
		}); err != nil {
			return err
		}
	}
	// The CPU each steady cell used per message, by peer: where the
	// machine's cores are the bottleneck, it decides the rates.
	cpu := map[bool][]float64{}
	for _, oneTx := range []bool{false, true} {
		peerSide := ""
		if oneTx {
			peerSide = ", goqite 1 tx"
		}
		for _, w := range []int{1, 8} {
			name := fmt.Sprintf("AckAndReceive, %d consumers%s", w, peerSide)
			if err := row("steady", name, "/s", func(p queuePeer, _ string) (float64, error) {
				if err := fillQueue(ctx, p, c.n, c.batch, body); err != nil {
					return 0, err
				}
				before, ok := processCPU()
				rate, err := steadyConsume(ctx, p, c.n, w, oneTx)
				if after, _ := processCPU(); ok {
					_, isOncekv := p.(*oncekvQueue)
					cpu[isOncekv] = append(cpu[isOncekv], float64((after-before).Microseconds())/float64(c.n))
				}
				return rate, err
			}); err != nil {
				return err
			}
			if len(cpu[true]) > 0 && len(cpu[false]) > 0 {
				slices.Sort(cpu[true])
				slices.Sort(cpu[false])
				fmt.Printf("  process CPU per message (median): oncekv %.0f µs, goqite %.0f µs\n",
					cpu[true][len(cpu[true])/2], cpu[false][len(cpu[false])/2])
			}
			clear(cpu)
		}
	}
	var loopCommits []uint64
	for _, q := range []float64{0.5, 0.99} {
		if err := row("e2e", fmt.Sprintf("end-to-end p%.0f, AckAndReceive", q*100), "µs", func(p queuePeer, _ string) (float64, error) {
			lat, commits, err := endToEndLoop(ctx, p, c.e2e, body)
			if err != nil {
				return 0, err
			}
			loopCommits = append(loopCommits, commits...)
			return float64(lat[int(q*float64(len(lat)-1))].Microseconds()), nil
		}); err != nil {
			return err
		}
	}
	if len(loopCommits) > 0 {
		slices.Sort(loopCommits)
		fmt.Printf("end-to-end, AckAndReceive loop, oncekv commits from the enqueue's start to the receipt: p50 %d, p99 %d, max %d\n",
			loopCommits[len(loopCommits)/2], loopCommits[int(0.99*float64(len(loopCommits)-1))], loopCommits[len(loopCommits)-1])
	}
	for _, q := range []float64{0.5, 0.99} {
		if err := row("e2e", fmt.Sprintf("end-to-end p%.0f, blocking receive", q*100), "µs", func(p queuePeer, _ string) (float64, error) {
			lat, err := endToEnd(ctx, p, c.e2e, body)
			if err != nil {
				return 0, err
			}
			return float64(lat[int(q*float64(len(lat)-1))].Microseconds()), nil
		}); err != nil {
			return err
		}
	}
	for _, depth := range []int{c.shallow, c.deep} {
		if err := row("depth", fmt.Sprintf("receive+ack with %d queued", depth), "/s", func(p queuePeer, _ string) (float64, error) {
			if err := fillQueue(ctx, p, depth+c.n/4, 1000, body); err != nil {
				return 0, err
			}
			return parallel(c.n/4, 1, func(int) error {
				ok, err := p.receiveAck(ctx)
				if err == nil && !ok {
					err = errors.New("no visible message in a full queue")
				}
				return err
			})
		}); err != nil {
			return err
		}
	}
	return nil
}

// parallel runs n calls of f on w goroutines and returns calls per second.
func parallel(n, w int, f func(i int) error) (float64, error) {
	var wg sync.WaitGroup
	errs := make([]error, w)
	start := time.Now()
	for g := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += w {
				if err := f(i); err != nil {
					errs[g] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds(), errors.Join(errs...)
}

// fillQueue enqueues n messages in batches.
func fillQueue(ctx context.Context, p queuePeer, n, batch int, body []byte) error {
	for i := 0; i < n; i += batch {
		keys := make([]string, 0, batch)
		for j := i; j < min(i+batch, n); j++ {
			keys = append(keys, fmt.Sprint("f", j))
		}
		if err := p.enqueueBatch(ctx, keys, body); err != nil {
			return err
		}
	}
	return nil
}

// steadyConsume receives and acks n messages, all visible, on w
// goroutines that each lease one, then ack it and lease the next with
// ackLease while messages are left, and returns messages per second.
func steadyConsume(ctx context.Context, p queuePeer, n, w int, oneTx bool) (float64, error) {
	var claimed atomic.Int64 // leases taken: never more than the n queued
	take := func() bool { return claimed.Add(1) <= int64(n) }
	errs := make([]error, w)
	var wg sync.WaitGroup
	start := time.Now()
	for g := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !take() {
				return
			}
			m, err := p.lease(ctx)
			for err == nil && take() {
				m, err = p.ackLease(ctx, m, oneTx)
			}
			if err == nil {
				err = p.ack(ctx, m)
			}
			errs[g] = err
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds(), errors.Join(errs...)
}

// endToEndLoop sends n messages one at a time, each after the last was
// received, to a consumer looping (consumeLoop), and returns the sorted
// latencies from the start of the send to the receipt, and the sorted
// counts of commits between them where the peer counts them.
func endToEndLoop(ctx context.Context, p queuePeer, n int, body []byte) ([]time.Duration, []uint64, error) {
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	type receipt struct {
		at      time.Time
		commits uint64
	}
	received := make(chan receipt, 1)
	done := make(chan error, 1)
	go func() {
		done <- p.consumeLoop(cctx, func() {
			c, _ := p.commits()
			received <- receipt{time.Now(), c}
		})
	}()
	lat := make([]time.Duration, 0, n)
	var commits []uint64
	for i := range n {
		time.Sleep(5 * time.Millisecond) // let the consumer commit the last ack and block
		c0, counted := p.commits()
		start := time.Now()
		if err := p.enqueue(ctx, fmt.Sprint("l", i), body); err != nil {
			return nil, nil, err
		}
		var r receipt
		select {
		case r = <-received:
		case err := <-done:
			return nil, nil, fmt.Errorf("the consumer stopped: %v", err)
		}
		lat = append(lat, r.at.Sub(start))
		if counted {
			commits = append(commits, r.commits-c0)
		}
	}
	stop()
	if err := <-done; err != nil {
		return nil, nil, err
	}
	slices.Sort(lat)
	slices.Sort(commits)
	return lat, commits, nil
}

// endToEnd sends n messages one at a time, each after the last was
// received, to a consumer blocked in a receive, and returns the sorted
// latencies from the start of the send to the end of the receive.
func endToEnd(ctx context.Context, p queuePeer, n int, body []byte) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	received := make(chan error)
	for i := range n {
		go func() { received <- p.receiveWait(ctx) }()
		time.Sleep(2 * time.Millisecond) // let the consumer block first
		start := time.Now()
		if err := p.enqueue(ctx, fmt.Sprint("e", i), body); err != nil {
			return nil, err
		}
		if err := <-received; err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	return lat, nil
}
