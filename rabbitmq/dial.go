package rabbitmq

import (
	"context"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// dialTimeout bounds the TCP connect and the AMQP handshake of a dial, as
// amqp091-go's own default does, when ctx has no earlier deadline.
const dialTimeout = 30 * time.Second

// dial opens a connection to url with cfg, and gives up with ctx's error
// when ctx ends first, even in the middle of the handshake (amqp091-go's
// DialConfig takes no context): the socket's deadline is moved to the
// past, which fails every read and write of the handshake at once.
func dial(ctx context.Context, url string, cfg amqp.Config) (*amqp.Connection, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	inner := cfg.Dial
	if inner == nil {
		// amqp091-go's DefaultDial, with the connect cut short by ctx too.
		inner = func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: dialTimeout}
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The handshake's deadline; openComplete clears it.
			if err := c.SetDeadline(time.Now().Add(dialTimeout)); err != nil {
				_ = c.Close()
				return nil, err
			}
			return c, nil
		}
	}
	var (
		mu   sync.Mutex
		sock net.Conn
	)
	cfg.Dial = func(network, addr string) (net.Conn, error) {
		c, err := inner(network, addr)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		sock = c
		return c, nil
	}
	abort := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if sock != nil {
			_ = sock.SetDeadline(time.Unix(1, 0))
		}
	})
	conn, err := amqp.DialConfig(url, cfg)
	if !abort() {
		// ctx ended while dialling: the handshake failed, or, if it had
		// just succeeded, the socket's deadline is now in the past.
		if err == nil {
			_ = conn.Close()
		}
		return nil, ctx.Err()
	}
	return conn, err
}
