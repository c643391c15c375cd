package main

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
)

// openView opens the store at path read-only (a URL: its admin handler's
// copy) and a view of the queue name in it.
func openView(sf *storeFlags, path, name string) (*oncekv.DB, *queue.View, error) {
	db, err := sf.open(path, true)
	if err != nil {
		return nil, nil, err
	}
	v, err := queue.NewView(db, name)
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return db, v, nil
}

// messageState is where a live message stands at now.
func messageState(m *queue.Message, now time.Time) string {
	switch {
	case m.VisibleAt.IsZero():
		return "waiting" // behind an earlier message of its ordering key
	case !m.LeaseUntil.IsZero() && now.Before(m.LeaseUntil):
		return "in flight"
	case m.VisibleAt.After(now):
		return "delayed"
	}
	return "ready"
}

// maxExcerpt is how much of a body a row shows.
const maxExcerpt = 40

// excerpt is the start of b for a row.
func excerpt(b []byte) string {
	if len(b) <= maxExcerpt {
		return printable(b)
	}
	cut := b[:maxExcerpt]
	for len(cut) > 0 && !utf8.Valid(cut) {
		cut = cut[:len(cut)-1] // not in the middle of a character
	}
	return printable(cut) + fmt.Sprintf("… (%d bytes)", len(b))
}

// age is how long ago t was, at now, for a row ("-" for zero).
func age(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Second).String()
}

// pageFlags are the -after and -limit of a listing.
type pageFlags struct {
	after uint64
	limit int
}

func (p *pageFlags) check() error {
	if p.limit <= 0 {
		return &usageError{fmt.Sprintf("-limit %d: must be positive", p.limit)}
	}
	return nil
}

// seconds is a JSON age back as a duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
