package watermill_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	wm "github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/watermill"
)

// TestRouterWithGoChannel runs the middleware in a Router on Watermill's
// in-memory Pub/Sub: two handlers of one topic (two dedup scopes), each
// message published twice with one UUID, one poison message, one that
// fails once. Each handler applies each message once; the duplicates are
// acked, not redelivered; the poison message lands on the poison topic
// (PoisonQueueWithFilter with IsPoison) once per handler; the flaky one is
// nacked, redelivered by gochannel, and applied.
func TestRouterWithGoChannel(t *testing.T) {
	db := openDB(t)
	logger := wm.NopLogger{}
	pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 64}, logger)
	defer pubsub.Close()
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	require.NoError(t, err)
	poison, err := middleware.PoisonQueueWithFilter(pubsub, "poison", watermill.IsPoison)
	require.NoError(t, err)
	once, err := watermill.Middleware(db, nil)
	require.NoError(t, err)
	router.AddMiddleware(poison, once)

	var mu sync.Mutex
	flakyFailed := map[string]bool{}
	handler := func(name string) message.NoPublishHandlerFunc {
		h := watermill.HandlerFunc(func(tx *oncekv.Tx, msg *message.Message) ([]*message.Message, error) {
			switch msg.UUID {
			case "poison":
				return nil, oncekv.Permanent(errors.New("cannot be applied"))
			case "flaky":
				mu.Lock()
				defer mu.Unlock()
				if !flakyFailed[name] {
					flakyFailed[name] = true
					return nil, errors.New("upstream timeout")
				}
			}
			return nil, count(tx, name+"/"+msg.UUID)
		})
		return func(msg *message.Message) error { _, err := h(msg); return err }
	}
	router.AddConsumerHandler("billing", "payments", pubsub, handler("billing"))
	router.AddConsumerHandler("shipping", "payments", pubsub, handler("shipping"))

	poisoned, err := pubsub.Subscribe(context.Background(), "poison")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	<-router.Running()

	ids := []string{"evt-1", "evt-2", "evt-3", "poison", "flaky"}
	for _, id := range ids {
		for range 2 {
			require.NoError(t, pubsub.Publish("payments", message.NewMessage(id, []byte(id))))
		}
	}
	want := map[string]uint64{}
	for _, h := range []string{"billing", "shipping"} {
		for _, id := range []string{"evt-1", "evt-2", "evt-3", "flaky"} {
			want[h+"/"+id] = 1
		}
	}
	require.Eventually(t, func() bool { return len(applied(t, db)) == len(want) }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, want, applied(t, db))

	// Two handlers, two deliveries each: four poison messages.
	for range 4 {
		select {
		case m := <-poisoned:
			require.Equal(t, "poison", m.UUID)
			require.Contains(t, m.Metadata.Get(middleware.ReasonForPoisonedKey), "cannot be applied")
			m.Ack()
		case <-time.After(10 * time.Second):
			t.Fatal("a poison message did not reach the poison topic")
		}
	}
}
