package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/oncekv/oncekv"
)

// The demo's handlers: dedup is scoped to (handler, key).
const (
	depositHandler  = "deposit"
	withdrawHandler = "withdraw"
)

// stormWorkers is how many goroutines deliver the retry storm.
const stormWorkers = 8

// account is an opening balance of the demo bank.
type account struct {
	name    string
	opening int64
}

var accounts = []account{{"alice", 1000}, {"bob", 500}, {"carol", 250}}

// transfer is one logical operation on an account: the idempotency key, and
// the payload every delivery of it carries.
type transfer struct {
	key     string
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// storm is the retry storm of step 2: each deposit and how many times the
// "broker" delivers it.
var storm = []struct {
	transfer
	deliveries int
}{
	{transfer{"dep-001", "alice", 100}, 4},
	{transfer{"dep-002", "bob", 250}, 3},
	{transfer{"dep-003", "carol", 75}, 5},
	{transfer{"dep-004", "alice", 40}, 3},
	{transfer{"dep-005", "bob", 60}, 4},
	{transfer{"dep-006", "carol", 300}, 5},
}

// runDemo is the demo subcommand.
func runDemo(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("db", defaultDBPath, "database `file`; an existing oncekv file there is replaced")
	keep := fs.Bool("keep", false, "keep an existing store: balances carry over and keys get a per-run prefix")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: kvdemo demo [-db PATH] [-keep]\n\nRuns the scripted story on a fresh store.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}

	exists, err := checkStore(*path)
	if err != nil {
		// The demo deletes only its own kind of file; anything else may be
		// someone's data.
		return fmt.Errorf("%w; left untouched, choose another -db path", err)
	}
	if exists && !*keep {
		if err := os.Remove(*path); err != nil {
			return err
		}
	}
	d := &demo{out: stdout, path: *path}
	return d.run()
}

// demo is one run of the scripted story.
type demo struct {
	out  io.Writer
	path string
	db   *oncekv.DB

	// prefix is put in front of every idempotency key of this run. It is
	// empty on a fresh store; a kept store's later runs need new keys, or
	// every deposit would (rightly) be a duplicate of the first run's.
	prefix string
	// closed holds the counters of the sessions already closed: db.Stats
	// counts since Open only.
	closed oncekv.Stats
	// receipt is dep-001's response, which step 5 expects back.
	receipt []byte
	// failures counts checks that printed MISMATCH.
	failures int
	// steps counts the story's steps printed so far.
	steps int
}

// step returns the number of the next step of the story.
func (d *demo) step() int {
	d.steps++
	return d.steps
}

func (d *demo) run() (err error) {
	steps := []func() error{d.open, d.retryStorm, d.keyReuse, d.effectErrors, d.reopen, d.windowStory, d.fencingStories, d.queueStory, d.outboxStory, d.summary}
	defer func() {
		if d.db != nil {
			if cerr := d.db.Close(); err == nil {
				err = cerr
			}
		}
	}()
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	if d.failures > 0 {
		return fmt.Errorf("%d check(s) failed, see MISMATCH above", d.failures)
	}
	d.printf("\nAll checks passed. Look inside with: kvdemo inspect -db %s\n", d.path)
	return nil
}

// open is step 1: open the store and make sure the bank has its accounts.
func (d *demo) open() error {
	db, err := oncekv.Open(d.path, nil)
	if err != nil {
		return err
	}
	d.db = db
	var run uint64
	err = db.Update(func(tx *oncekv.Tx) error {
		meta, err := tx.CreateBucketIfNotExists([]byte("kvdemo"))
		if err != nil {
			return err
		}
		run, err = meta.NextSequence()
		if err != nil {
			return err
		}
		if err := meta.Put([]byte("runs"), strconv.AppendUint(nil, run, 10)); err != nil {
			return err
		}
		bank, err := tx.CreateBucketIfNotExists(bankBucket)
		if err != nil {
			return err
		}
		for _, a := range accounts {
			_, ok, err := readBalance(bank, a.name)
			if err != nil {
				return err
			}
			if ok {
				continue // a kept store keeps its balances
			}
			if err := writeBalance(bank, a.name, a.opening); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if run == 1 {
		d.printf("oncekv demo on %s (new file)\n", d.path)
	} else {
		d.prefix = fmt.Sprintf("r%d-", run)
		d.printf("oncekv demo on %s (kept, run %d: keys start with %q)\n", d.path, run, d.prefix)
	}
	d.printf("\n%d. Open the store; user bucket %q holds the balances\n", d.step(), bankBucket)
	bal, err := d.balances()
	if err != nil {
		return err
	}
	for _, a := range accounts {
		d.printf("   %-6s %6d\n", a.name, bal[a.name])
	}
	return nil
}

// retryStorm is step 2: every deposit delivered several times, shuffled,
// from several goroutines, against an effect that is not idempotent.
func (d *demo) retryStorm() error {
	var order []int // index into storm, one per delivery
	for i, s := range storm {
		for range s.deliveries {
			order = append(order, i)
		}
	}
	// A fixed seed keeps the printed order the same from run to run.
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })

	d.printf("\n%d. Retry storm: %d deposits, each delivered 3-5 times, shuffled, %d goroutines\n", d.step(), len(storm), stormWorkers)
	d.printf("   effect: read balance, add amount, write it back (NOT idempotent)\n")
	var first []string
	for _, i := range order[:8] {
		first = append(first, d.prefix+storm[i].key)
	}
	d.printf("   order:  %s ...\n", strings.Join(first, " "))

	before, err := d.balances()
	if err != nil {
		return err
	}
	statsBefore := d.db.Stats()

	type outcome struct {
		applied   int
		responses map[string]bool
	}
	var (
		mu       sync.Mutex
		outcomes = make([]outcome, len(storm))
		firstErr error
		wg       sync.WaitGroup
		queue    = make(chan int)
	)
	for range stormWorkers {
		wg.Go(func() {
			for i := range queue {
				res, err := d.apply(depositHandler, storm[i].transfer, depositEffect(storm[i].transfer, nil))
				mu.Lock()
				switch o := &outcomes[i]; {
				case err != nil:
					if firstErr == nil {
						firstErr = err
					}
				default:
					if !res.Duplicate {
						o.applied++
					}
					if o.responses == nil {
						o.responses = map[string]bool{}
					}
					o.responses[string(res.Response)] = true
					if i == 0 {
						d.receipt = res.Response
					}
				}
				mu.Unlock()
			}
		})
	}
	for _, i := range order {
		queue <- i
	}
	close(queue)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}

	stats := d.db.Stats().Sub(statsBefore).Handlers[depositHandler]
	applied, sameResponses := 0, true
	for _, o := range outcomes {
		applied += o.applied
		sameResponses = sameResponses && o.applied == 1 && len(o.responses) == 1
	}
	d.printf("   deliveries received    %3d\n", len(order))
	d.printf("   effects applied        %3d   (distinct keys: %d)  %s\n", applied, len(storm),
		d.check(applied == len(storm) && stats.Applied == uint64(applied)))
	d.printf("   duplicates suppressed  %3d   (db.Stats)  %s\n", stats.DuplicatesSuppressed,
		d.check(stats.DuplicatesSuppressed == uint64(len(order)-len(storm))))
	d.printf("   each key: applied once, every delivery got the same response  %s\n", d.check(sameResponses))

	after, err := d.balances()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, " %-8s\tbefore\tdeposits\texpected\tactual\t\n", "account")
	for _, a := range accounts {
		var sum int64
		for _, s := range storm {
			if s.Account == a.name {
				sum += s.Amount
			}
		}
		want := before[a.name] + sum
		fmt.Fprintf(tw, " %-8s\t%d\t%d\t%d\t%d\t  %s\n", a.name, before[a.name], sum, want, after[a.name],
			d.check(after[a.name] == want))
	}
	return tw.Flush()
}

// keyReuse is step 3: a known key with another payload is refused.
func (d *demo) keyReuse() error {
	orig := storm[0].transfer
	reused := orig
	reused.Amount = 999
	d.printf("\n%d. Key reuse: %s%s again, but %s +%d instead of +%d\n", d.step(), d.prefix, orig.key, orig.Account, reused.Amount, orig.Amount)
	before, err := d.balances()
	if err != nil {
		return err
	}
	var ran atomic.Int32
	_, err = d.apply(depositHandler, reused, depositEffect(reused, &ran))
	if err == nil {
		return errors.New("key reuse was accepted")
	}
	after, err2 := d.balances()
	if err2 != nil {
		return err2
	}
	isReuse := errors.Is(err, oncekv.ErrKeyReuse)
	d.printf("   error: %v\n", err)
	d.printf("   errors.Is(err, oncekv.ErrKeyReuse) = %t, effect not run, %s still %d  %s\n", isReuse,
		orig.Account, after[orig.Account], d.check(isReuse && ran.Load() == 0 && after[orig.Account] == before[orig.Account]))
	if !isReuse {
		return err
	}
	return nil
}

// effectErrors is step 4: a transient error rolls back and a retry runs
// the effect again; a permanent one is recorded and replayed.
func (d *demo) effectErrors() error {
	d.printf("\n%d. Effect errors\n", d.step())

	dep := transfer{"dep-007", "carol", 10}
	d.printf("   transient  %s%s %s +%d, the ledger times out on the first try\n", d.prefix, dep.key, dep.Account, dep.Amount)
	before, err := d.balances()
	if err != nil {
		return err
	}
	timeout := errors.New("ledger timeout (simulated)")
	_, tryErr := d.apply(depositHandler, dep, func(tx *oncekv.Tx) ([]byte, error) {
		if _, err := depositEffect(dep, nil)(tx); err != nil {
			return nil, err
		}
		return nil, timeout // after the write: the rollback must undo it
	})
	if !errors.Is(tryErr, timeout) {
		return fmt.Errorf("transient failure: got %v, want the simulated timeout", tryErr)
	}
	mid, err := d.balances()
	if err != nil {
		return err
	}
	d.printf("     try 1    error: %v\n", tryErr)
	d.printf("              rolled back, nothing recorded: %s still %d  %s\n", dep.Account, mid[dep.Account],
		d.check(mid[dep.Account] == before[dep.Account]))
	res, err := d.apply(depositHandler, dep, depositEffect(dep, nil))
	if err != nil {
		return err
	}
	after, err := d.balances()
	if err != nil {
		return err
	}
	d.printf("     try 2    applied: %q  %s\n", res.Response,
		d.check(!res.Duplicate && after[dep.Account] == before[dep.Account]+dep.Amount))

	wd := transfer{"wd-001", "bob", 5000}
	d.printf("   permanent  %s%s %s -%d, more than %s has\n", d.prefix, wd.key, wd.Account, wd.Amount, wd.Account)
	var ran atomic.Int32
	withdraw := func(tx *oncekv.Tx) ([]byte, error) {
		ran.Add(1)
		bal, _, err := readBalance(tx.Bucket(bankBucket), wd.Account)
		if err != nil {
			return nil, err
		}
		if bal < wd.Amount {
			// No retry can fix this: record it, so duplicates get it back.
			return nil, oncekv.Permanent(fmt.Errorf("insufficient funds: %s has %d, asked %d", wd.Account, bal, wd.Amount))
		}
		return nil, writeBalance(tx.Bucket(bankBucket), wd.Account, bal-wd.Amount)
	}
	_, err1 := d.apply(withdrawHandler, wd, withdraw)
	if !errors.Is(err1, oncekv.ErrFailed) {
		return fmt.Errorf("permanent failure: got %v, want oncekv.ErrFailed", err1)
	}
	d.printf("     try 1    error: %v\n", err1)
	res, err2 := d.apply(withdrawHandler, wd, withdraw)
	failed := errors.Is(err2, oncekv.ErrFailed)
	d.printf("     try 2    same error, effect not run, errors.Is(err, oncekv.ErrFailed) = %t  %s\n", failed,
		d.check(failed && res.Duplicate && err2.Error() == err1.Error() && ran.Load() == 1))
	return nil
}

// reopen is step 5: marks are durable, so a redelivery after a restart is
// still a duplicate with the original response.
func (d *demo) reopen() error {
	key := d.prefix + storm[0].key
	d.printf("\n%d. Close and reopen the file, redeliver %s\n", d.step(), key)
	d.closed = d.db.Stats()
	err := d.db.Close()
	d.db = nil
	if err != nil {
		return err
	}
	if d.db, err = oncekv.Open(d.path, nil); err != nil {
		return err
	}
	var ran atomic.Int32
	res, err := d.apply(depositHandler, storm[0].transfer, depositEffect(storm[0].transfer, &ran))
	if err != nil {
		return err
	}
	age := time.Since(res.FirstSeen).Round(time.Millisecond)
	d.printf("   duplicate=%t, effect not run, response %q (stored %v ago)  %s\n", res.Duplicate, res.Response, age,
		d.check(res.Duplicate && ran.Load() == 0 && bytes.Equal(res.Response, d.receipt)))
	return nil
}

// summary is step 6: the counters of both sessions, per handler.
func (d *demo) summary() error {
	stats := addStats(d.closed, d.db.Stats())
	d.printf("\n%d. Stats of both sessions (db.Stats counts since Open)\n", d.step())
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, " %-8s\tapplied\tduplicates\tkey reuse\teffect errors\tfailed\tfailed replayed\t\n", "handler")
	row := func(name string, c oncekv.Counters) {
		fmt.Fprintf(tw, " %-8s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", name, c.Applied, c.DuplicatesSuppressed,
			c.KeyReuses, c.EffectErrors, c.FailedRecorded, c.FailedReplayed)
	}
	for _, h := range []string{depositHandler, withdrawHandler} {
		row(h, stats.Handlers[h])
	}
	row("total", stats.Total)
	return tw.Flush()
}

// apply delivers t once to handler, under this run's key prefix.
func (d *demo) apply(handler string, t transfer, effect func(*oncekv.Tx) ([]byte, error)) (oncekv.Result, error) {
	payload, err := json.Marshal(t)
	if err != nil {
		return oncekv.Result{}, err
	}
	return d.db.Apply(context.Background(), oncekv.Request{Handler: handler, Key: d.prefix + t.key, Payload: payload}, effect)
}

// depositEffect adds t's amount to its account by read-modify-write: applied
// twice, it would deposit twice. ran, when not nil, counts its runs.
func depositEffect(t transfer, ran *atomic.Int32) func(tx *oncekv.Tx) ([]byte, error) {
	return func(tx *oncekv.Tx) ([]byte, error) {
		if ran != nil {
			ran.Add(1)
		}
		bank := tx.Bucket(bankBucket)
		if bank == nil {
			return nil, fmt.Errorf("bucket %q is missing", bankBucket)
		}
		bal, ok, err := readBalance(bank, t.Account)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, oncekv.Permanent(fmt.Errorf("no account %q", t.Account))
		}
		if err := writeBalance(bank, t.Account, bal+t.Amount); err != nil {
			return nil, err
		}
		return fmt.Appendf(nil, "%s +%d -> %d", t.Account, t.Amount, bal+t.Amount), nil
	}
}

// balances reads every account's balance in one snapshot.
func (d *demo) balances() (map[string]int64, error) {
	bal := map[string]int64{}
	err := d.db.View(func(tx *oncekv.Tx) error {
		bank := tx.Bucket(bankBucket)
		if bank == nil {
			return fmt.Errorf("bucket %q is missing", bankBucket)
		}
		for _, a := range accounts {
			n, _, err := readBalance(bank, a.name)
			if err != nil {
				return err
			}
			bal[a.name] = n
		}
		return nil
	})
	return bal, err
}

// check turns a check's result into the word printed after it, and
// remembers a failure.
func (d *demo) check(ok bool) string {
	if ok {
		return "OK"
	}
	d.failures++
	return "MISMATCH"
}

func (d *demo) printf(format string, args ...any) {
	fmt.Fprintf(d.out, format, args...)
}

// addStats sums two snapshots, here the counters of two sessions.
func addStats(a, b oncekv.Stats) oncekv.Stats {
	sum := oncekv.Stats{Total: addCounters(a.Total, b.Total), Handlers: map[string]oncekv.Counters{}}
	for h, c := range a.Handlers {
		sum.Handlers[h] = c
	}
	for h, c := range b.Handlers {
		sum.Handlers[h] = addCounters(sum.Handlers[h], c)
	}
	return sum
}

func addCounters(a, b oncekv.Counters) oncekv.Counters {
	return oncekv.Counters{
		Applied:              a.Applied + b.Applied,
		DuplicatesSuppressed: a.DuplicatesSuppressed + b.DuplicatesSuppressed,
		InProgressConflicts:  a.InProgressConflicts + b.InProgressConflicts,
		KeyReuses:            a.KeyReuses + b.KeyReuses,
		FailedRecorded:       a.FailedRecorded + b.FailedRecorded,
		FailedReplayed:       a.FailedReplayed + b.FailedReplayed,
		EffectErrors:         a.EffectErrors + b.EffectErrors,
		InvalidRequests:      a.InvalidRequests + b.InvalidRequests,
		Aborted:              a.Aborted + b.Aborted,
	}
}
