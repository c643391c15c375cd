package queue_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
)

// BenchmarkStats reads the gauges of queues of growing depth, half of the
// messages ready and half delayed: the counts the writes keep make its
// cost the same at every depth (it read the whole index before).
func BenchmarkStats(b *testing.B) {
	for _, depth := range []int{100, 10_000} {
		b.Run(fmt.Sprint("depth-", depth), func(b *testing.B) {
			db, err := oncekv.Open(filepath.Join(b.TempDir(), "q.db"), &oncekv.Options{NoSync: true, ExpireInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			q, err := queue.Open(db, "jobs", nil)
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			err = db.Update(func(tx *oncekv.Tx) error {
				for i := range depth {
					m := queue.Message{Key: fmt.Sprint("k", i), Body: []byte("b")}
					if i%2 == 1 {
						m.Delay = 1 << 40
					}
					if _, err := q.EnqueueTx(tx, m); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				st, err := q.Stats()
				if err != nil || st.Depth != uint64(depth) || st.Ready != uint64(depth/2) {
					b.Fatal(st, err)
				}
			}
		})
	}
}
