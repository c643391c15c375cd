package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oncekv/oncekv"
)

// The article's two stories about order, which deduplication alone does not
// fix: a write delayed past a newer one, and a worker that stalls past its
// lease and wakes up after another took over.

// configBucket holds the setting that the reorder story writes.
var configBucket = []byte("config")

// fencingStories runs both stories on a store of their own, with a fake
// clock so that a worker can stall past its lease in a moment.
func (d *demo) fencingStories() error {
	return withScratchStore("fencing", oncekv.Options{}, func(db *oncekv.DB, clock *fakeClock) error {
		if err := d.reorder(db); err != nil {
			return err
		}
		return d.takeover(db, clock)
	})
}

// reorder is the first story: set(x,1) takes its fence, stalls in a GC
// pause, and arrives after set(x,2). Each message is applied once either
// way; the fence is what keeps the late one from winning.
func (d *demo) reorder(db *oncekv.DB) error {
	d.printf("\n%d. Reorder: set(x,1) stalls in a GC pause and arrives after set(x,2) (separate store)\n", d.step())
	first, err := db.NextFence("config/x")
	if err != nil {
		return err
	}
	second, err := db.NextFence("config/x")
	if err != nil {
		return err
	}
	d.printf("   writer A takes fence %d and pauses; writer B takes fence %d\n", first, second)
	res, err := setX(db, 2, second)
	if err != nil {
		return err
	}
	d.printf("   B  set(x,2): %s\n", res.Response)
	res, err = setX(db, 1, first)
	if err != nil {
		return err
	}
	d.printf("   A  set(x,1): %s\n", res.Response)
	dup, err := setX(db, 1, first)
	if err != nil {
		return err
	}
	var x string
	var fence uint64
	err = db.View(func(tx *oncekv.Tx) error {
		b := tx.Bucket(configBucket)
		x, fence = string(b.Get([]byte("x"))), b.Fence([]byte("x"))
		return nil
	})
	if err != nil {
		return err
	}
	d.printf("   x = %s with fence %d; set(x,1) redelivered: duplicate=%t  %s\n", x, fence, dup.Duplicate,
		d.check(x == "2" && fence == second && dup.Duplicate && strings.HasPrefix(string(res.Response), "refused")))
	return nil
}

// setX delivers the message "set x to value", which carries fence. Its
// effect writes x with the fence. A refused write is not an error to retry:
// the message is recorded as done with what happened to it, so that a
// redelivery is a duplicate rather than another attempt.
func setX(db *oncekv.DB, value int, fence uint64) (oncekv.Result, error) {
	req := oncekv.Request{
		Handler: "config",
		Key:     fmt.Sprintf("set-x-%d", value),
		Payload: fmt.Appendf(nil, `{"x":%d,"fence":%d}`, value, fence),
	}
	return db.Apply(context.Background(), req, func(tx *oncekv.Tx) ([]byte, error) {
		b, err := tx.CreateBucketIfNotExists(configBucket)
		if err != nil {
			return nil, err
		}
		err = b.PutFenced([]byte("x"), fmt.Append(nil, value), fence)
		var fe *oncekv.FenceError
		if errors.As(err, &fe) {
			return fmt.Appendf(nil, "refused, stored fence %d > presented %d", fe.Stored, fe.Presented), nil
		}
		if err != nil {
			return nil, err
		}
		return []byte("applied"), nil
	})
}

// mailService stands for an external system that takes the two values a
// claim hands it, each for its own job: it deduplicates on the claim's Key
// (the same at every retry and takeover), answering a repeated call with
// the receipt of the first, and it fences on the claim's Token (greater at
// every takeover), refusing a token older than one it has seen for the key.
type mailService struct {
	receipts  map[string][]byte
	newest    map[string]uint64
	delivered int
}

func (m *mailService) send(key string, token uint64) ([]byte, error) {
	if token < m.newest[key] {
		return nil, fmt.Errorf("mail service: token %d is older than %d", token, m.newest[key])
	}
	m.newest[key] = token
	if r, ok := m.receipts[key]; ok {
		return r, nil // a retry of a call already made: nothing is sent again
	}
	m.delivered++
	r := fmt.Appendf(nil, "message %d sent", m.delivered)
	m.receipts[key] = r
	return r, nil
}

// takeover is the second story: an e-mail cannot join the store's
// transaction, so it is sent under a claim. Worker A sends and stalls past
// its lease before Complete; worker B takes over and sends again with the
// same key, which the mail service recognises, so one e-mail goes out. A's
// late attempts are refused twice: by the mail service, which checks the
// token, and by the store.
func (d *demo) takeover(db *oncekv.DB, clock *fakeClock) error {
	const lease = 30 * time.Second
	ctx := context.Background()
	payload, err := json.Marshal(map[string]string{"to": "ann@example.com"})
	if err != nil {
		return err
	}
	req := oncekv.Request{Handler: "email", Key: "welcome-ann", Payload: payload}
	mail := &mailService{receipts: map[string][]byte{}, newest: map[string]uint64{}}

	d.printf("\n%d. Claim with a lease for an e-mail, which cannot join the transaction (separate store)\n", d.step())
	a, err := db.Claim(ctx, req, lease)
	if err != nil {
		return err
	}
	if _, err := mail.send(a.Key(), a.Token()); err != nil {
		return err
	}
	d.printf("   worker A claims %s: token %d, lease %v, sends, then stalls 45s\n", req.Key, a.Token(), lease)
	clock.Add(45 * time.Second)
	b, err := db.Claim(ctx, req, lease)
	if err != nil {
		return err
	}
	receipt, err := mail.send(b.Key(), b.Token())
	if err != nil {
		return err
	}
	res, err := b.Complete(ctx, receipt, nil)
	if err != nil {
		return err
	}
	d.printf("   worker B takes over: token %d, same key, %s, completes  %s\n", b.Token(), res.Response,
		d.check(b.Token() > a.Token() && b.Key() == a.Key()))
	_, sendErr := mail.send(a.Key(), a.Token())
	_, err = a.Complete(ctx, []byte("sent by A"), nil)
	d.printf("   worker A wakes: send refused, Complete: %v  %s\n", trimOncekv(err),
		d.check(sendErr != nil && errors.Is(err, oncekv.ErrFenced)))
	again, err := db.Claim(ctx, req, lease)
	if err != nil {
		return err
	}
	d.printf("   e-mails delivered: %d; redelivery: done=%t, %q  %s\n", mail.delivered, again.Done(),
		again.Result().Response, d.check(mail.delivered == 1 && again.Done()))
	return nil
}

// trimOncekv shortens an error for a line of the demo: the part after the
// request it names.
func trimOncekv(err error) string {
	if err == nil {
		return "<nil>"
	}
	s := err.Error()
	if i := strings.LastIndex(s, "\": "); i >= 0 {
		return s[i+3:]
	}
	return s
}
