package watermill

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/oncekv/oncekv"
)

// txKey is the context key of the transaction.
type txKey struct{}

// Tx returns the oncekv transaction the middleware runs msg's handler in,
// from msg's context, or nil outside the middleware. Everything the
// handler writes through it commits with the message's mark, or not at
// all. It is valid only while the handler runs.
func Tx(msg *message.Message) *oncekv.Tx {
	tx, _ := msg.Context().Value(txKey{}).(*oncekv.Tx)
	return tx
}

// TxHandler is a Watermill handler that gets the transaction as an
// argument: the messages it returns are published by the Router after the
// commit, and stored with the mark, so a duplicate publishes them again.
type TxHandler func(tx *oncekv.Tx, msg *message.Message) ([]*message.Message, error)

// HandlerFunc adapts h to a message.HandlerFunc for a Router whose
// middleware (Middleware) supplies the transaction. Called without it, it
// returns ErrNoTx wrapped with oncekv.Permanent, and h does not run.
func HandlerFunc(h TxHandler) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		tx := Tx(msg)
		if tx == nil {
			return nil, oncekv.Permanent(ErrNoTx)
		}
		return h(tx, msg)
	}
}

// withTx returns ctx carrying tx.
func withTx(ctx context.Context, tx *oncekv.Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}
