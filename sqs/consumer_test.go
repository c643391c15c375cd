package sqs_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	oncesqs "github.com/oncekv/oncekv/sqs"
)

// TestConsumerDeletesAfterCommit sends messages a quarter of which are
// sent twice (a producer's retry: a new message id, the same key
// attribute) and requires each key applied once, the second copies
// suppressed and counted, and every message deleted.
func TestConsumerDeletesAfterCommit(t *testing.T) {
	c := client(server(t))
	url, _ := newQueue(t, c, 5*time.Second, 0, false)
	ks := keys(60)
	sent := 0
	for i, k := range ks {
		send(t, c, url, k)
		sent++
		if i%4 == 0 {
			send(t, c, url, k)
			sent++
		}
	}
	db := openDB(t)
	cons, err := oncesqs.NewConsumer(db, c, count, oncesqs.Options{Handler: "orders", QueueURL: url,
		Key: oncesqs.AttributeKey(oncesqs.DefaultKeyAttribute), WaitTime: time.Second, Visibility: 5 * time.Second, Logger: quiet})
	require.NoError(t, err)
	runUntil(t, cons, 20*time.Second, func() bool { return depth(t, c, url) == 0 })
	requireOnce(t, db, ks)
	s := cons.Stats()
	require.Equal(t, uint64(15), s.Duplicates)
	require.Equal(t, uint64(60), s.Applied)
	require.Equal(t, uint64(sent), s.Deleted)
}
