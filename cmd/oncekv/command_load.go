package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/dumpfile"
)

func init() {
	register(&command{
		name: "load", short: "load a dump into a new or empty store",
		args: "PATH FILE", nargs: 2,
		summary: "Load a dump (JSON lines, \"-\" for standard input) into the store PATH, which must be\n" +
			"new or empty; a load that fails removes a file it created. Marks keep their state,\n" +
			"response and first-seen time; marks already expired by -retention are skipped, and\n" +
			"so are claims in progress (their worker is on the other machine: those keys are\n" +
			"applied afresh). Token counters, key fences and versions and bucket sequences are\n" +
			"raised to the dump's, so the new store issues no number the old one issued.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			sf := storeFlags{create: true}
			sf.register(fs, false, true)
			return func(out io.Writer, args []string) error { return runLoad(&sf, out, args[0], args[1]) }
		},
	})
}

// loadBatch is how many marks, or keys, one transaction of load writes:
// few commits, and bounded memory whatever the size of the dump.
const loadBatch = 1000

// loader writes a dump into a store in batches.
type loader struct {
	db                   *oncekv.DB
	marks                []oncekv.MarkInfo
	kvs                  []*dumpfile.Line // every line but marks, in order
	read, loaded, claims int
	buckets, keys        int
	fences, counters     int
	// maxToken is the greatest token of the marks read, claims in
	// progress included: a dump of a build that wrote no counters still
	// moves the claim tokens past every one the far side may have seen.
	maxToken uint64
}

func runLoad(sf *storeFlags, out io.Writer, path, file string) (err error) {
	in := io.Reader(os.Stdin)
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	created := !exists(path)
	db, err := sf.open(path, false)
	if err != nil {
		return err
	}
	defer func() {
		// Runs after the close below. A failed load into a file it created
		// takes the file away, half-loaded batches and all, so that the
		// same load can run again once the dump is fixed.
		if err != nil && created {
			if rerr := os.Remove(path); rerr != nil {
				fmt.Fprintf(warnings, "oncekv: warning: the half-loaded %s could not be removed: %v\n", path, rerr)
			}
		}
	}()
	defer closeInto(db, &err)
	if err := requireEmpty(db); err != nil {
		return err
	}
	l := &loader{db: db}
	r := dumpfile.NewReader(in)
	for {
		d, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("oncekv: load: %s: %w", file, err)
		}
		if err := l.add(d); err != nil {
			return fmt.Errorf("oncekv: load: %s: %w", file, err)
		}
	}
	l.kvs = append(l.kvs, &dumpfile.Line{Type: dumpfile.TypeCounter, Last: l.maxToken})
	l.counters-- // not the dump's
	if err := errors.Join(l.flushMarks(), l.flushKVs()); err != nil {
		return err
	}
	fmt.Fprintf(out, "loaded %d marks of %d (%d expired skipped), %d keys in %d buckets, %d fences of deleted keys, %d counters\n",
		l.loaded, l.read, l.read-l.loaded, l.keys, l.buckets, l.fences, l.counters)
	if l.claims > 0 {
		fmt.Fprintf(warnings, "oncekv: warning: %d claims in progress not loaded: their keys will be applied afresh\n", l.claims)
	}
	return nil
}

// requireEmpty refuses a store with marks or user buckets: load adds, and
// mixing two stores' keys is a merge, which it does not do.
func requireEmpty(db *oncekv.DB) error {
	errFull := errors.New("oncekv: load: the store is not empty; load into a new file")
	err := db.Marks(oncekv.MarkFilter{}, func(oncekv.MarkInfo) error { return errFull })
	if err != nil {
		return err
	}
	return db.View(func(tx *oncekv.Tx) error {
		return tx.ForEachBucket(func([]byte) error { return errFull })
	})
}

func (l *loader) add(d *dumpfile.Line) error {
	switch d.Type {
	case dumpfile.TypeMark:
		l.maxToken = max(l.maxToken, d.Mark.Token)
		if d.Mark.State == oncekv.MarkInProgress {
			l.claims++
			return nil
		}
		if l.marks = append(l.marks, d.Mark); len(l.marks) == loadBatch {
			return l.flushMarks()
		}
	default:
		if l.kvs = append(l.kvs, d); len(l.kvs) == loadBatch {
			return l.flushKVs()
		}
	}
	return nil
}

func (l *loader) flushMarks() error {
	n, err := l.db.LoadMarks(l.marks)
	l.read += len(l.marks)
	l.loaded += n
	l.marks = l.marks[:0]
	return err
}

func (l *loader) flushKVs() error {
	err := l.db.Update(func(tx *oncekv.Tx) error {
		for _, d := range l.kvs {
			if err := loadLine(tx, d); err != nil {
				return err
			}
		}
		return nil
	})
	defer func() { l.kvs = l.kvs[:0] }()
	if err != nil {
		return err
	}
	for _, d := range l.kvs {
		switch d.Type {
		case dumpfile.TypeKV:
			l.keys++
		case dumpfile.TypeBucket:
			l.buckets++
		case dumpfile.TypeFence:
			l.fences++
		case dumpfile.TypeCounter:
			l.counters++
		}
	}
	return nil
}

// loadLine writes a line other than a mark in tx: a bucket and its
// sequence, a key with its value, fence and version, the fence of a
// deleted key, a counter. Numbers are raised, never lowered.
func loadLine(tx *oncekv.Tx, d *dumpfile.Line) error {
	switch d.Type {
	case dumpfile.TypeCounter:
		return tx.RaiseTokenCounter(oncekv.TokenCounter{Resource: d.Resource, Last: d.Last})
	case dumpfile.TypeFence:
		return tx.RaiseKeyFence(oncekv.KeyFence{Bucket: d.Bucket, Key: d.Key, Fence: d.Fence, Version: d.Version})
	}
	b, err := tx.CreateBucketIfNotExists(d.Bucket)
	if err != nil {
		return err
	}
	if d.Type == dumpfile.TypeBucket {
		return b.RaiseSequence(d.Sequence)
	}
	if err := b.Put(d.Key, d.Value); err != nil {
		return err
	}
	if d.Fence == 0 && d.Version == 0 {
		return nil
	}
	return tx.RaiseKeyFence(oncekv.KeyFence{Bucket: d.Bucket, Key: d.Key, Fence: d.Fence, Version: d.Version})
}
