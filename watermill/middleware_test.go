package watermill_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/watermill"
)

// wrap returns the middleware around h, with opts.
func wrap(t *testing.T, db *oncekv.DB, opts *watermill.Options, h watermill.TxHandler) message.HandlerFunc {
	t.Helper()
	mw, err := watermill.Middleware(db, opts)
	require.NoError(t, err)
	return mw(watermill.HandlerFunc(h))
}

// TestDuplicateAnsweredFromTheMark: the second delivery of a message (same
// UUID) does not run the handler, and returns the messages the first run
// produced, with their UUIDs and metadata, so the Router publishes them
// again for the next consumer to deduplicate.
func TestDuplicateAnsweredFromTheMark(t *testing.T) {
	db := openDB(t)
	runs := 0
	h := wrap(t, db, &watermill.Options{Handler: "billing"}, func(tx *oncekv.Tx, msg *message.Message) ([]*message.Message, error) {
		runs++
		if err := count(tx, msg.UUID); err != nil {
			return nil, err
		}
		out := message.NewMessage("receipt-"+msg.UUID, []byte("paid "+string(msg.Payload)))
		out.Metadata.Set("order", "42")
		return []*message.Message{out}, nil
	})
	first, err := h(message.NewMessage("evt-1", []byte("19.99")))
	require.NoError(t, err)
	again, err := h(message.NewMessage("evt-1", []byte("19.99")))
	require.NoError(t, err)
	require.Equal(t, 1, runs, "the duplicate ran the handler")
	require.Equal(t, map[string]uint64{"evt-1": 1}, applied(t, db))
	require.Len(t, again, 1)
	require.Equal(t, first[0].UUID, again[0].UUID)
	require.Equal(t, first[0].Payload, again[0].Payload)
	require.Equal(t, "42", again[0].Metadata.Get("order"))

	// A handler that produces nothing: the duplicate produces nothing too.
	_, err = h(message.NewMessage("evt-2", nil))
	require.NoError(t, err)
	none := wrap(t, db, &watermill.Options{Handler: "quiet"}, func(tx *oncekv.Tx, msg *message.Message) ([]*message.Message, error) {
		return nil, count(tx, "quiet-"+msg.UUID)
	})
	for range 2 {
		out, err := none(message.NewMessage("evt-3", nil))
		require.NoError(t, err)
		require.Empty(t, out)
	}
	require.Equal(t, uint64(1), applied(t, db)["quiet-evt-3"])
}

// TestHandlerErrors: a transient failure rolls back the handler's writes
// and is returned as it is (the Router nacks); the retry applies. A
// permanent failure, a reused key, a message without a key are poison,
// and a redelivery of the permanent failure is poison again without
// running the handler.
func TestHandlerErrors(t *testing.T) {
	db := openDB(t)
	flaky := errors.New("upstream timeout")
	runs := map[string]int{}
	h := wrap(t, db, &watermill.Options{Handler: "h", KeyMetadata: "event_id"}, func(tx *oncekv.Tx, msg *message.Message) ([]*message.Message, error) {
		key := msg.Metadata.Get("event_id")
		runs[key]++
		if err := count(tx, key); err != nil {
			return nil, err
		}
		switch {
		case key == "flaky" && runs[key] == 1:
			return nil, flaky
		case key == "poison":
			return nil, oncekv.Permanent(errors.New("invalid order"))
		}
		return nil, nil
	})
	msg := func(uuid, key, payload string) *message.Message {
		m := message.NewMessage(uuid, []byte(payload))
		if key != "" {
			m.Metadata.Set("event_id", key)
		}
		return m
	}

	_, err := h(msg("u1", "flaky", "x"))
	require.ErrorIs(t, err, flaky)
	require.False(t, watermill.IsPoison(err), "a transient failure is nacked, not poison")
	require.NotContains(t, applied(t, db), "flaky", "the failed run's writes rolled back")
	_, err = h(msg("u2", "flaky", "x")) // another UUID, the same business key
	require.NoError(t, err)
	require.Equal(t, uint64(1), applied(t, db)["flaky"])

	for range 2 {
		_, err = h(msg("u3", "poison", "p"))
		require.True(t, watermill.IsPoison(err), "%v", err)
		var pe *watermill.PoisonError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "poison", pe.Key)
		require.ErrorIs(t, err, oncekv.ErrFailed)
	}
	require.Equal(t, 1, runs["poison"], "the redelivery of a failed key ran the handler")

	_, err = h(msg("u4", "flaky", "another payload"))
	require.True(t, watermill.IsPoison(err))
	require.ErrorIs(t, err, oncekv.ErrKeyReuse)

	_, err = h(msg("u5", "", "x"))
	require.True(t, watermill.IsPoison(err))
	require.ErrorIs(t, err, watermill.ErrNoKey)
	require.ErrorContains(t, err, `"event_id"`)
}

// TestHandlerScopeWithoutRouter: without Options.Handler and outside a
// Router there is no scope: the message is poison, nothing runs.
func TestHandlerScopeWithoutRouter(t *testing.T) {
	db := openDB(t)
	h := wrap(t, db, nil, func(*oncekv.Tx, *message.Message) ([]*message.Message, error) {
		t.Fatal("the handler ran without a scope")
		return nil, nil
	})
	_, err := h(message.NewMessage("evt-10", nil))
	require.True(t, watermill.IsPoison(err))
	require.ErrorIs(t, err, watermill.ErrNoHandler)
}

// TestHandlerFuncOutsideTheMiddleware: a TxHandler called without the
// middleware gets no transaction: ErrNoTx, permanent, and it does not run.
func TestHandlerFuncOutsideTheMiddleware(t *testing.T) {
	ran := false
	_, err := watermill.HandlerFunc(func(*oncekv.Tx, *message.Message) ([]*message.Message, error) {
		ran = true
		return nil, nil
	})(message.NewMessage("u", nil))
	require.ErrorIs(t, err, watermill.ErrNoTx)
	require.True(t, oncekv.IsPermanent(err))
	require.False(t, ran)
	require.Nil(t, watermill.Tx(message.NewMessage("u", nil)))
	_, err = watermill.Middleware(nil, nil)
	require.ErrorIs(t, err, watermill.ErrInvalidOptions)
}

// TestConcurrentDeliveries: 16 goroutines deliver the same 50 messages
// at once (group commits shared between them): each applied once, and
// every delivery gets the same produced message back.
func TestConcurrentDeliveries(t *testing.T) {
	db := openDB(t)
	h := wrap(t, db, &watermill.Options{Handler: "h"}, func(tx *oncekv.Tx, msg *message.Message) ([]*message.Message, error) {
		return []*message.Message{message.NewMessage("out-"+msg.UUID, msg.Payload)}, count(tx, msg.UUID)
	})
	var wg sync.WaitGroup
	errs := make(chan error, 16*50)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				id := string(rune('A'+i/26)) + string(rune('a'+i%26))
				out, err := h(message.NewMessage(id, []byte(id)))
				if err == nil && (len(out) != 1 || out[0].UUID != "out-"+id) {
					err = errors.New("wrong produced message for " + id)
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	got := applied(t, db)
	require.Len(t, got, 50)
	for k, n := range got {
		require.Equal(t, uint64(1), n, "key %s", k)
	}
}
