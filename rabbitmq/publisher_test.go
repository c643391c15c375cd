package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/rabbitmq"
)

func newPublisher(t *testing.T, o rabbitmq.PublisherOptions) *rabbitmq.Publisher {
	t.Helper()
	p, err := rabbitmq.NewPublisher(&o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

// TestPublisherSendsConfirmed sends to a real broker: a routed message
// arrives persistent, its key as message_id and its token in the fence
// header; one that no queue takes is a *ReturnedError; one that a full
// queue refuses (x-overflow reject-publish) is ErrNacked; a key longer
// than a message_id can hold is permanent and sends nothing; after Close,
// ErrClosed, which is not permanent.
func TestPublisherSendsConfirmed(t *testing.T) {
	url := brokerURL(t)
	ch := channel(t, url)
	q, full := unique("pub"), unique("pub.full")
	deleteAfter(t, url, []string{q, full}, nil)
	_, err := ch.QueueDeclare(q, true, false, false, false, nil)
	require.NoError(t, err)
	_, err = ch.QueueDeclare(full, true, false, false, false, amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	require.NoError(t, err)
	ctx := context.Background()

	p := newPublisher(t, rabbitmq.PublisherOptions{URL: url, RoutingKey: q, ContentType: "application/json"})
	require.NoError(t, p.Send(ctx, &queue.Message{Key: "order-42", Body: []byte(`{"n":1}`), Token: 7}))
	d, ok, err := ch.Get(q, true)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "order-42", d.MessageId)
	require.Equal(t, "7", d.Headers[rabbitmq.DefaultFenceHeader])
	require.Equal(t, amqp.Persistent, d.DeliveryMode)
	require.Equal(t, "application/json", d.ContentType)
	require.Equal(t, `{"n":1}`, string(d.Body))

	nowhere := newPublisher(t, rabbitmq.PublisherOptions{URL: url, RoutingKey: unique("no-such-queue")})
	err = nowhere.Send(ctx, &queue.Message{Key: "k", Body: []byte("x"), Token: 1})
	var re *rabbitmq.ReturnedError
	require.ErrorAs(t, err, &re)
	require.ErrorIs(t, err, rabbitmq.ErrReturned)
	require.Equal(t, uint16(amqp.NoRoute), re.Code)
	require.False(t, oncekv.IsPermanent(err), "a binding may appear: the relay retries")
	require.ErrorContains(t, err, `"k"`)

	fp := newPublisher(t, rabbitmq.PublisherOptions{URL: url, RoutingKey: full})
	require.NoError(t, fp.Send(ctx, &queue.Message{Key: "first", Body: []byte("1"), Token: 1}))
	err = fp.Send(ctx, &queue.Message{Key: "second", Body: []byte("2"), Token: 2})
	require.ErrorIs(t, err, rabbitmq.ErrNacked)
	require.False(t, oncekv.IsPermanent(err))

	err = p.Send(ctx, &queue.Message{Key: strings.Repeat("k", 256), Body: []byte("x")})
	require.ErrorIs(t, err, rabbitmq.ErrKeyTooLong)
	require.True(t, oncekv.IsPermanent(err))
	err = p.Send(ctx, &queue.Message{Body: []byte("x")})
	require.ErrorIs(t, err, rabbitmq.ErrNoKey)
	require.True(t, oncekv.IsPermanent(err))
	_, ok, err = ch.Get(q, true)
	require.NoError(t, err)
	require.False(t, ok, "a refused key sends nothing")

	require.NoError(t, p.Close())
	err = p.Send(ctx, &queue.Message{Key: "late", Body: []byte("x")})
	require.ErrorIs(t, err, rabbitmq.ErrClosed)
	require.False(t, oncekv.IsPermanent(err))
}

// TestPublisherConcurrentSends: 8 goroutines share one Publisher, some to
// a routed key and some to an unroutable one (Route picks): each Send gets
// its own answer, the returns matched to the right publishes, and every
// routed message arrives once.
func TestPublisherConcurrentSends(t *testing.T) {
	url := brokerURL(t)
	ch := channel(t, url)
	q := unique("pub.concurrent")
	deleteAfter(t, url, []string{q}, nil)
	_, err := ch.QueueDeclare(q, true, false, false, false, nil)
	require.NoError(t, err)
	p := newPublisher(t, rabbitmq.PublisherOptions{URL: url, Route: func(m *queue.Message) string {
		if strings.HasPrefix(m.Key, "lost") {
			return unique("nowhere")
		}
		return q
	}})
	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				key := "ok"
				if i%5 == 0 {
					key = "lost"
				}
				m := &queue.Message{Key: key + "-" + string(rune('a'+w)) + "-" + string(rune('a'+i)), Body: []byte("x"), Token: uint64(w*each + i + 1)}
				err := p.Send(context.Background(), m)
				if strings.HasPrefix(m.Key, "lost") {
					var re *rabbitmq.ReturnedError
					if !errors.As(err, &re) {
						errs <- fmt.Errorf("send of unroutable %s: %v, want a *ReturnedError", m.Key, err)
					}
				} else if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err, "a send got another's answer")
	}
	routed := workers * (each - each/5)
	info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	require.NoError(t, err)
	require.Equal(t, routed, info.Messages)
}

// TestPublisherSendHonoursContext: a Send whose context is already done
// returns its error without publishing.
func TestPublisherSendHonoursContext(t *testing.T) {
	url := brokerURL(t)
	p := newPublisher(t, rabbitmq.PublisherOptions{URL: url, RoutingKey: "q"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	require.ErrorIs(t, p.Send(ctx, &queue.Message{Key: "k"}), context.DeadlineExceeded)
}
