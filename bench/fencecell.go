package main

import (
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/oncekv/oncekv"
)

// fenceResult is the PutFenced cell: one transaction of keys new keys
// written with PutFenced against one written with plain Put, each the
// median over the runs.
type fenceResult struct {
	keys          int
	plain, fenced time.Duration // per transaction, commit included
}

// fenceRunsPer is how many transactions of each kind the cell times per
// -runs: one is a few milliseconds, so more of them steady the median.
const fenceRunsPer = 5

// fenceCell times, in one oncekv store with sync off, transactions of
// cfg.fenceKeys new keys each: with Bucket.Put into one bucket and with
// Bucket.PutFenced into another (so both trees grow alike), alternately,
// the first of each pair switching every run, after a warm-up pair.
func (b *bench) fenceCell() (*fenceResult, error) {
	dir, err := os.MkdirTemp(b.cfg.tmp, "oncekv-bench-fence-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	db, err := openOncekvDB(b.storeConfig(dir, false))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	value := fill("fenced value", effectSize)
	write := func(run int, fenced bool) (time.Duration, error) {
		name := []byte("plain")
		if fenced {
			name = []byte("fenced")
		}
		keys := make([][]byte, b.cfg.fenceKeys)
		for j := range keys {
			keys[j] = fmt.Appendf(nil, "k-%06d-%09d", run, j)
		}
		t0 := time.Now()
		err := db.Update(func(tx *oncekv.Tx) error {
			bk, err := tx.CreateBucketIfNotExists(name)
			for j := 0; err == nil && j < len(keys); j++ {
				if fenced {
					err = bk.PutFenced(keys[j], value, uint64(run)+1)
				} else {
					err = bk.Put(keys[j], value)
				}
			}
			return err
		})
		return time.Since(t0), err
	}
	var plain, fenced []time.Duration
	for run := range b.cfg.runs*fenceRunsPer + 1 {
		for k := range 2 {
			isFenced := (run+k)%2 == 1
			took, err := write(run, isFenced)
			if err != nil {
				return nil, err
			}
			switch {
			case run == 0: // warm-up
			case isFenced:
				fenced = append(fenced, took)
			default:
				plain = append(plain, took)
			}
		}
	}
	slices.Sort(plain)
	slices.Sort(fenced)
	f := &fenceResult{keys: b.cfg.fenceKeys, plain: plain[len(plain)/2], fenced: fenced[len(fenced)/2]}
	progress("%-40s Put %v, PutFenced %v per transaction of %d keys: %.2fx", "oncekv PutFenced / Put",
		f.plain.Round(time.Microsecond), f.fenced.Round(time.Microsecond), f.keys, f.fenced.Seconds()/f.plain.Seconds())
	return f, nil
}
