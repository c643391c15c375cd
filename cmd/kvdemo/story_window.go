package main

import (
	"context"
	"time"

	"github.com/oncekv/oncekv"
)

// windowStory shows the dedup window on a store of its own, with a fake
// clock so that a day passes in a moment: marks grouped by the hour they
// were first seen, a retry inside the window suppressed, the window
// expiring, and a retry after it applied again.
func (d *demo) windowStory() error {
	opts := oncekv.Options{
		WindowSpan:     time.Hour,
		Retention:      24 * time.Hour,
		ExpireInterval: -1, // expiry runs when the story says so
	}
	return withScratchStore("window", opts, d.windowSteps)
}

func (d *demo) windowSteps(db *oncekv.DB, clock *fakeClock) error {
	d.printf("\n%d. The dedup window: 1h windows, 24h retention, a fake clock (separate store)\n", d.step())
	deliver := func(key string) (bool, error) {
		res, err := db.Apply(context.Background(), oncekv.Request{Handler: "reading", Key: key, Payload: []byte(key)},
			func(tx *oncekv.Tx) ([]byte, error) {
				b, err := tx.CreateBucketIfNotExists([]byte("readings"))
				if err != nil {
					return nil, err
				}
				return nil, b.Put([]byte(key), []byte(clock.Now().Format(time.Kitchen)))
			})
		return res.Duplicate, err
	}
	for _, step := range []struct {
		at   string
		keys []string
	}{{"09:00", []string{"t-0900-a", "t-0900-b", "t-0900-c"}}, {"10:30", []string{"t-1030-a", "t-1030-b"}}} {
		at, _ := time.Parse("15:04", step.at)
		clock.Set(time.Date(2026, 3, 14, at.Hour(), at.Minute(), 0, 0, time.UTC))
		for _, k := range step.keys {
			if _, err := deliver(k); err != nil {
				return err
			}
		}
		d.printf("   %s  %d readings applied\n", step.at, len(step.keys))
	}
	for _, w := range db.Stats().Windows {
		d.printf("   window %s-%s  %d marks\n", w.Start.UTC().Format("15:04"), w.End.UTC().Format("15:04"), w.Marks)
	}

	clock.Set(time.Date(2026, 3, 14, 11, 0, 0, 0, time.UTC))
	dup, err := deliver("t-0900-a")
	if err != nil {
		return err
	}
	d.printf("   11:00  t-0900-a redelivered: duplicate=%t  %s\n", dup, d.check(dup))

	clock.Set(time.Date(2026, 3, 15, 10, 15, 0, 0, time.UTC))
	st, err := db.Expire(context.Background())
	if err != nil {
		return err
	}
	d.printf("   next day 10:15, Expire: %d window dropped, %d marks (the 09:00 window is past 24h)  %s\n",
		st.Windows, st.Marks, d.check(st.Windows == 1 && st.Marks == 3))
	late, err := deliver("t-0900-a")
	if err != nil {
		return err
	}
	d.printf("   t-0900-a redelivered after the window: duplicate=%t, applied again (by design)  %s\n", late, d.check(!late))
	recent, err := deliver("t-1030-a")
	if err != nil {
		return err
	}
	d.printf("   t-1030-a redelivered, its window still live: duplicate=%t  %s\n", recent, d.check(recent))
	return nil
}
