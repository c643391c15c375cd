package idemcore

import (
	"context"
	"time"

	"github.com/oncekv/oncekv"
)

// Embedded returns db as a Store. Its staged writes are
// func(*oncekv.Tx) error, run in the bbolt transaction that stores the
// response.
func Embedded(db *oncekv.DB) Store { return embedded{db} }

// DB returns the *oncekv.DB under s, if s is Embedded's.
func DB(s Store) (*oncekv.DB, bool) {
	e, ok := s.(embedded)
	return e.db, ok
}

type embedded struct{ db *oncekv.DB }

func (e embedded) Now() time.Time { return e.db.Now() }

func (e embedded) Retention() time.Duration { return e.db.WindowReport().Retention }

func (e embedded) Accepts(w any) bool {
	_, ok := w.(func(*oncekv.Tx) error)
	return ok
}

func (e embedded) Claim(ctx context.Context, req oncekv.Request, lease time.Duration) (Claim, error) {
	c, err := e.db.Claim(ctx, req, lease)
	if err != nil {
		return nil, err
	}
	return embeddedClaim{c}, nil
}

type embeddedClaim struct{ *oncekv.Claim }

func (c embeddedClaim) Complete(ctx context.Context, response []byte, writes []any) (oncekv.Result, error) {
	var effect func(tx *oncekv.Tx) error
	if len(writes) > 0 {
		effect = func(tx *oncekv.Tx) error {
			return RunWrites(writes, func(w func(*oncekv.Tx) error) error { return w(tx) })
		}
	}
	return c.Claim.Complete(ctx, response, effect)
}

func (c embeddedClaim) Release(ctx context.Context, why error) error { return c.Fail(ctx, why) }

func (c embeddedClaim) Forget(ctx context.Context) error { return c.Abandon(ctx) }
