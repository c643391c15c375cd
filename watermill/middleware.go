package watermill

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/oncekv/oncekv"
)

// Options configures Middleware. nil means every default.
type Options struct {
	// Handler is the oncekv handler of every message: the dedup scope.
	// Default: the Router's name of the handler the message is for
	// (message.HandlerNameFromCtx), so each handler has its own scope.
	Handler string
	// KeyMetadata names the metadata field that carries the idempotency
	// key. Default: none, the key is the message's UUID.
	KeyMetadata string
	// Logger receives "duplicate suppressed" at info level, with the
	// handler, key, topic and age. Default: discard.
	Logger *slog.Logger
}

// Middleware returns a Watermill handler middleware that runs each
// message's handler once per (handler, key) through db's Apply: the
// handler runs inside the write transaction (Tx(msg), or a TxHandler
// adapted by HandlerFunc), and its writes commit with the message's mark;
// the messages it returns are stored with the mark too, and returned to
// the Router after the commit.
//
// A message whose key was applied before is answered without running the
// handler: the middleware returns the stored messages again and no error,
// so the Router publishes them (same UUIDs) and acks. Every other answer
// is by oncekv.Classify: what no retry can fix (GiveUp) is a *PoisonError
// (see IsPoison); anything else is returned as it is, and the Router
// nacks the message for the subscriber to redeliver.
//
// Errors: ErrInvalidOptions when db is nil.
func Middleware(db *oncekv.DB, opts *Options) (message.HandlerMiddleware, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: db is required", ErrInvalidOptions)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			return apply(db, &o, h, msg)
		}
	}, nil
}

// apply is one message through the store.
func apply(db *oncekv.DB, o *Options, h message.HandlerFunc, msg *message.Message) ([]*message.Message, error) {
	key, err := keyOf(msg, o.KeyMetadata)
	if err != nil {
		return nil, &PoisonError{Err: err}
	}
	handler := o.Handler
	if handler == "" {
		handler = message.HandlerNameFromCtx(msg.Context())
	}
	if handler == "" {
		return nil, &PoisonError{Key: key, Err: oncekv.Permanent(ErrNoHandler)}
	}
	orig := msg.Context()
	var out []*message.Message
	res, err := db.Apply(orig, oncekv.Request{Handler: handler, Key: key, Payload: msg.Payload}, func(tx *oncekv.Tx) ([]byte, error) {
		// The effect may run twice (a shared commit rolled back by
		// another's failure): only the last run commits, so only its
		// messages are kept.
		out = nil
		msg.SetContext(withTx(orig, tx))
		defer msg.SetContext(orig)
		msgs, err := h(msg)
		if err != nil {
			return nil, err
		}
		b, err := encodeProduced(msgs)
		if err != nil {
			return nil, err
		}
		out = msgs
		return b, nil
	})
	if err != nil {
		if oncekv.Classify(err).Action == oncekv.GiveUp {
			return nil, &PoisonError{Key: key, Err: err}
		}
		return nil, err
	}
	if !res.Duplicate {
		return out, nil
	}
	o.Logger.Info("duplicate suppressed", "handler", handler, "key", key,
		"topic", message.SubscribeTopicFromCtx(orig), "age_ms", db.Now().Sub(res.FirstSeen).Milliseconds())
	msgs, err := decodeProduced(res.Response)
	if err != nil {
		return nil, &PoisonError{Key: key, Err: err}
	}
	return msgs, nil
}

// keyOf returns msg's key: its UUID, or the metadata field named.
func keyOf(msg *message.Message, field string) (string, error) {
	if field == "" {
		if msg.UUID == "" {
			return "", oncekv.Permanent(fmt.Errorf("%w: empty UUID", ErrNoKey))
		}
		return msg.UUID, nil
	}
	if k := msg.Metadata.Get(field); k != "" {
		return k, nil
	}
	return "", oncekv.Permanent(errors.Join(ErrNoKey, fmt.Errorf("no metadata field %q", field)))
}
