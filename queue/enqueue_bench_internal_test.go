package queue

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/oncekv/oncekv"
)

// BenchmarkOutboxEntryBytes measures what one outbox entry costs on disk,
// Apply's effect writing a row and enqueueing its message: with EnqueueTx
// as it is (two marks: the Apply's and the enqueue's), and with the
// enqueue's mark left out (insertTx alone, what reusing the Apply's mark
// would write). It reports the file's high-water growth per entry
// (B/entry) and the bytes of the marks' keys per entry; run it with a
// fixed count, e.g. -benchtime=20000x, for steady figures.
func BenchmarkOutboxEntryBytes(b *testing.B) {
	for _, c := range []struct {
		name    string
		enqueue func(q *Queue, tx *oncekv.Tx, m Message) error
	}{
		{"two-marks", func(q *Queue, tx *oncekv.Tx, m Message) error { _, err := q.EnqueueTx(tx, m); return err }},
		{"one-mark", func(q *Queue, tx *oncekv.Tx, m Message) error { _, err := q.insertTx(tx, &m); return err }},
	} {
		b.Run(c.name, func(b *testing.B) {
			db, err := oncekv.Open(filepath.Join(b.TempDir(), "outbox.db"), &oncekv.Options{NoSync: true, ExpireInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			q, err := Open(db, "outbox", nil)
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			before := db.Stats().File.HighWater
			ctx := context.Background()
			body := []byte(`{"note":"n-1","op":"set-title","title":"groceries"}`)
			b.ResetTimer()
			for i := range b.N {
				key := fmt.Sprintf("note-1/edit-%08d", i)
				_, err := db.Apply(ctx, oncekv.Request{Handler: "edit", Key: key, Payload: body}, func(tx *oncekv.Tx) ([]byte, error) {
					notes, err := tx.CreateBucketIfNotExists([]byte("notes"))
					if err != nil {
						return nil, err
					}
					if err := notes.Put([]byte(key), body); err != nil {
						return nil, err
					}
					return nil, c.enqueue(q, tx, Message{Key: key, Body: body, OrderingKey: "note-1"})
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if err := db.Sync(); err != nil {
				b.Fatal(err)
			}
			grown := db.Stats().File.HighWater - before
			b.ReportMetric(float64(grown)/float64(b.N), "B/entry")
			marks := db.Stats().LiveMarks
			b.ReportMetric(float64(marks)/float64(b.N), "marks/entry")
		})
	}
}
