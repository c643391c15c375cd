package queue_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
)

// ExampleQueue_AckAndReceive is a steady consumer: each ack leases the
// next message in the same commit, one commit per message; on an empty
// queue it waits for the next enqueue, without polling.
func ExampleQueue_AckAndReceive() {
	db, q, done := exampleQueue("edits")
	defer done()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	for _, k := range []string{"edit-1", "edit-2", "edit-3"} {
		if _, err := q.Enqueue(ctx, queue.Message{Key: k, Body: []byte(k), OrderingKey: "note-7"}); err != nil {
			log.Fatal(err)
		}
	}

	go func() {
		_ = q.WaitDrained(context.Background())
		stop() // the consumer stops once all is done
	}()

	before := db.Stats().Commits
	m, err := q.Receive(ctx)
	for err == nil {
		fmt.Println("applying", m.Key)
		m, err = q.AckAndReceive(ctx, m)
		if errors.Is(err, oncekv.ErrFenced) {
			m, err = q.Receive(ctx) // the lease was taken over: go on
		}
	}
	// The last ack committed; the wait for a fourth message ended with ctx.
	fmt.Println("acked, then stopped:", errors.Is(err, queue.ErrNotReceived))
	fmt.Println("commits:", db.Stats().Commits-before)
	st, _ := q.Stats()
	fmt.Println("depth:", st.Depth)
	// Output:
	// applying edit-1
	// applying edit-2
	// applying edit-3
	// acked, then stopped: true
	// commits: 4
	// depth: 0
}
