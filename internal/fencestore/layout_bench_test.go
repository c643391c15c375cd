package fencestore_test

import (
	"encoding/binary"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// BenchmarkFenceLayout measures, on bare bbolt, what a fenced write costs
// in each place its fence could live, against a plain Put of the same
// value: "twotree" is the layout oncekv uses (the key's record in a
// records bucket of its own: a read and a write there, then the value in
// the user bucket), "onetree" the alternative of a header in front of the
// value (a read and a write in the user bucket only). The three are timed
// alternately in one run, so the ratios compare like with like; they are
// the ceiling of what moving the fence next to the value could gain.
func BenchmarkFenceLayout(b *testing.B) {
	for _, mode := range []struct {
		name   string
		noSync bool
		perTx  int
	}{{"durable", false, 1}, {"nosync", true, 1}, {"tx1000", true, 1000}} {
		b.Run(mode.name, func(b *testing.B) {
			db, err := bolt.Open(filepath.Join(b.TempDir(), "l.db"), 0o600, &bolt.Options{NoSync: mode.noSync})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = db.Close() })
			value := make([]byte, 64)
			record := make([]byte, 22) // a key record's size: envelope, two full-width integers, checksum
			headered := make([]byte, len(record)+len(value))
			run := func(i uint64, bucket string, write func(user, records *bolt.Bucket, key []byte) error) time.Duration {
				start := time.Now()
				if err := db.Update(func(tx *bolt.Tx) error {
					user, err := tx.CreateBucketIfNotExists([]byte("u/" + bucket))
					if err != nil {
						return err
					}
					records, err := tx.CreateBucketIfNotExists([]byte("k/" + bucket))
					if err != nil {
						return err
					}
					for j := range uint64(mode.perTx) {
						key := binary.BigEndian.AppendUint64([]byte("key-"), (i-1)*uint64(mode.perTx)+j+1)
						if err := write(user, records, key); err != nil {
							return err
						}
					}
					return nil
				}); err != nil {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			var plain, two, one time.Duration
			var i uint64
			for b.Loop() {
				i++
				plain += run(i, "plain", func(user, _ *bolt.Bucket, key []byte) error { return user.Put(key, value) })
				two += run(i, "two", func(user, records *bolt.Bucket, key []byte) error {
					_ = records.Get(key)
					if err := records.Put(key, record); err != nil {
						return err
					}
					return user.Put(key, value)
				})
				one += run(i, "one", func(user, _ *bolt.Bucket, key []byte) error {
					_ = user.Get(key)
					return user.Put(key, headered)
				})
			}
			n := float64(b.N * mode.perTx)
			b.ReportMetric(float64(plain.Nanoseconds())/n, "plain-ns/op")
			b.ReportMetric(float64(two)/float64(plain), "twotree/plain")
			b.ReportMetric(float64(one)/float64(plain), "onetree/plain")
		})
	}
}
