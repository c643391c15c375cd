package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
)

// DefaultFenceHeader is the header the Publisher puts the fencing token
// in, as relay.HTTPSender does.
const DefaultFenceHeader = "Oncekv-Fence"

// maxMessageID is the longest AMQP shortstr, the type of message_id.
const maxMessageID = 255

// PublisherOptions configures a Publisher. A zero field takes its
// default.
type PublisherOptions struct {
	// URL is the broker's AMQP URI. Required.
	URL string
	// Config is the connection's configuration, as for amqp091-go's
	// DialConfig; its Recovery must be nil (the Publisher redials by
	// itself, on the next Send after a loss).
	Config amqp.Config
	// Exchange is where messages are published. Default "", the default
	// exchange, which routes by queue name.
	Exchange string
	// RoutingKey is every message's routing key (with the default
	// exchange: the queue's name). Required unless Route is set.
	RoutingKey string
	// Route, if set, returns a message's routing key instead.
	Route func(m *queue.Message) string
	// FenceHeader names the header of the delivery's fencing token, in
	// decimal. Default DefaultFenceHeader.
	FenceHeader string
	// ContentType is every message's content type. Default: none.
	ContentType string
	// Headers are added to every message (copied once, by NewPublisher);
	// FenceHeader takes precedence.
	Headers amqp.Table
}

func (o PublisherOptions) withDefaults() (PublisherOptions, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if o.URL == "" {
		bad("URL is required")
	} else if _, err := amqp.ParseURI(o.URL); err != nil {
		bad("URL: %w", err)
	}
	if o.RoutingKey == "" && o.Route == nil {
		bad("RoutingKey or Route is required")
	}
	if o.Config.Recovery != nil {
		bad("Config.Recovery must be nil: the publisher redials by itself")
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	if o.FenceHeader == "" {
		o.FenceHeader = DefaultFenceHeader
	}
	h := make(amqp.Table, len(o.Headers)+1)
	for k, v := range o.Headers {
		h[k] = v
	}
	o.Headers = h
	return o, nil
}

// Publisher publishes queue messages to RabbitMQ with publisher confirms:
// its Send is a relay.Sender. It is safe for concurrent use: the relay's
// workers share one channel, each waiting for the confirm of its own
// publish. Make one with NewPublisher; Close it when done.
type Publisher struct {
	opts PublisherOptions
	// turn is held (a token in it) by whoever opens or replaces link;
	// unlike a mutex, waiting for it honours ctx.
	turn   chan struct{}
	link   atomic.Pointer[link]
	closed atomic.Bool
}

// link is one connection and its confirming channel.
type link struct {
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns *returns
	blocked atomic.Pointer[string] // the reason, while the broker blocks publishing
	done    chan struct{}          // closed when the watcher has stopped
}

// NewPublisher returns a Publisher of opts. It connects to nothing: the
// first Send does.
//
// Errors: ErrInvalidOptions naming every bad field.
func NewPublisher(opts *PublisherOptions) (*Publisher, error) {
	var given PublisherOptions
	if opts != nil {
		given = *opts
	}
	o, err := given.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Publisher{opts: o, turn: make(chan struct{}, 1)}
	p.turn <- struct{}{}
	return p, nil
}

// Send publishes m, persistent, mandatory, with m.Key as its message_id
// (stable across every retry, takeover and redrive: the consumer's key)
// and m.Token in the FenceHeader (new at each delivery: to fence a late
// zombie, never a key). It returns nil only once the broker confirmed the
// publish (basic.ack): for a persistent message routed to a durable
// queue, once the queue has written it to disk.
//
// Errors, each naming the message's key: ErrKeyTooLong (permanent);
// *ReturnedError when no queue was bound to take it; ErrNacked when the
// broker nacked it or the connection was lost before the confirm;
// ErrBlocked while the broker blocks publishing; ctx's error, waiting for
// the connection or the confirm (the publish may have reached the broker:
// the relay sends it again, and the consumer deduplicates); ErrClosed
// after Close; and the dial's errors. All but the first are transient.
func (p *Publisher) Send(ctx context.Context, m *queue.Message) error {
	if len(m.Key) > maxMessageID {
		return oncekv.Permanent(fmt.Errorf("%w: key of %d bytes", ErrKeyTooLong, len(m.Key)))
	}
	if m.Key == "" {
		return oncekv.Permanent(fmt.Errorf("%w: the message's key is empty", ErrNoKey))
	}
	err := p.send(ctx, m)
	if err != nil {
		return fmt.Errorf("oncekv: rabbitmq: publish %q: %w", m.Key, err)
	}
	return nil
}

func (p *Publisher) send(ctx context.Context, m *queue.Message) error {
	l, err := p.current(ctx)
	if err != nil {
		return err
	}
	if reason := l.blocked.Load(); reason != nil {
		return fmt.Errorf("%w: %s", ErrBlocked, *reason)
	}
	rk := p.opts.RoutingKey
	if p.opts.Route != nil {
		rk = p.opts.Route(m)
	}
	fence := strconv.FormatUint(m.Token, 10)
	h := make(amqp.Table, len(p.opts.Headers)+1)
	for k, v := range p.opts.Headers {
		h[k] = v
	}
	h[p.opts.FenceHeader] = fence
	id := returnID(m.Key, fence)
	l.returns.expect(id)
	defer l.returns.forget(id)
	dc, err := l.ch.PublishWithDeferredConfirmWithContext(ctx, p.opts.Exchange, rk, true, false, amqp.Publishing{
		Headers:      h,
		ContentType:  p.opts.ContentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    m.Key,
		Timestamp:    time.Now(),
		Body:         m.Body,
	})
	if err != nil {
		return err
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		return err
	}
	// RabbitMQ sends the basic.return of an unroutable mandatory publish
	// before its basic.ack; returns.wait says whether one came.
	if r, ok := l.returns.wait(id); ok {
		return r
	}
	if !acked {
		if l.ch.IsClosed() {
			return fmt.Errorf("%w: the channel closed before the confirm", ErrNacked)
		}
		return ErrNacked
	}
	return nil
}

// current returns the live link, opening one when there is none or the
// last one was lost.
func (p *Publisher) current(ctx context.Context) (*link, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	if l := p.link.Load(); l != nil && !l.ch.IsClosed() {
		return l, nil
	}
	select {
	case <-p.turn:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { p.turn <- struct{}{} }()
	if p.closed.Load() {
		return nil, ErrClosed
	}
	if l := p.link.Load(); l != nil {
		if !l.ch.IsClosed() {
			return l, nil // another Send opened it while this one waited
		}
		l.close()
	}
	l, err := p.open(ctx)
	if err != nil {
		return nil, err
	}
	p.link.Store(l)
	return l, nil
}

// open dials and opens a confirming channel, with its watcher.
func (p *Publisher) open(ctx context.Context) (*link, error) {
	conn, err := dial(ctx, p.opts.URL, p.opts.Config)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("confirming channel: %w", err)
	}
	done := make(chan struct{})
	l := &link{conn: conn, ch: ch, returns: newReturns(done, p.opts.FenceHeader), done: done}
	rets := ch.NotifyReturn(make(chan amqp.Return))
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 1))
	go l.watch(rets, blocks)
	return l, nil
}

// watch records the link's returns and blocked state until its channel
// closes (amqp091-go then closes rets).
func (l *link) watch(rets <-chan amqp.Return, blocks <-chan amqp.Blocking) {
	defer close(l.done)
	for {
		select {
		case r, ok := <-rets:
			if !ok {
				return
			}
			l.returns.returned(r)
		case b, ok := <-blocks:
			if !ok {
				blocks = nil
				continue
			}
			if b.Active {
				reason := b.Reason
				l.blocked.Store(&reason)
			} else {
				l.blocked.Store(nil)
			}
		case q := <-l.returns.queries:
			q.reply <- l.returns.take(q.id)
		}
	}
}

// close closes the link's connection and waits for its watcher.
func (l *link) close() {
	_ = l.conn.Close()
	<-l.done
}

// Close closes the connection; a Send waiting for a confirm gets
// ErrNacked, and later ones ErrClosed. It returns once the Publisher's
// goroutine has stopped; it is safe to call more than once.
func (p *Publisher) Close() error {
	p.closed.Store(true)
	<-p.turn // no open in progress
	defer func() { p.turn <- struct{}{} }()
	if l := p.link.Swap(nil); l != nil {
		l.close()
	}
	return nil
}
