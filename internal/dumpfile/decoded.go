package dumpfile

import (
	"net/http"
	"time"

	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/queue"
)

// The readings of system records for a person: the "decoded" member of a
// dump line, and what the admin handler and the oncekv command print with
// -json. They are read, never loaded.

// Message is a queue message. Times are RFC 3339, absent when zero.
type Message struct {
	ID          uint64     `json:"id"`
	Key         Text       `json:"key"`
	OrderingKey Text       `json:"ordering_key,omitempty"`
	Attempt     int        `json:"attempt"`
	EnqueuedAt  time.Time  `json:"enqueued_at"`
	VisibleAt   *time.Time `json:"visible_at,omitempty"`
	LeaseUntil  *time.Time `json:"lease_until,omitempty"`
	Token       uint64     `json:"token,omitempty"`
	LastError   string     `json:"last_error,omitempty"`
	DeadAt      *time.Time `json:"dead_at,omitempty"`
	Body        Text       `json:"body"`
}

// MessageOf is m as a Message.
func MessageOf(m *queue.Message) Message {
	return Message{ID: m.ID, Key: Text(m.Key), OrderingKey: Text(m.OrderingKey),
		Attempt: m.Attempt, EnqueuedAt: m.EnqueuedAt.UTC(), VisibleAt: timePtr(m.VisibleAt),
		LeaseUntil: timePtr(m.LeaseUntil), Token: m.Token, LastError: m.LastError, DeadAt: timePtr(m.DeadAt),
		Body: m.Body}
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// HTTPRecord is an idemhttp record: its mark, and the stored answer.
type HTTPRecord struct {
	// Mark is absent in a dump's "decoded": that is on the mark's line.
	Mark        *Mark       `json:"mark,omitempty"`
	Status      int         `json:"status,omitempty"`
	Header      http.Header `json:"header,omitempty"`
	Body        Text        `json:"body,omitempty"`
	BodyOmitted bool        `json:"body_omitted,omitempty"`
}

// HTTPRecordOf is s as an HTTPRecord; the mark's raw response is left
// out, as the record decodes it.
func HTTPRecordOf(s *idemhttp.Stored) HTTPRecord {
	m := MarkOf(s.Mark)
	m.Response = nil
	j := AnswerOf(s.Record)
	j.Mark = &m
	return j
}

// AnswerOf is the stored answer r as an HTTPRecord without its mark; a
// nil r (a request still running) gives an empty one.
func AnswerOf(r *idemhttp.Record) HTTPRecord {
	var j HTTPRecord
	if r != nil {
		j.Status, j.Header, j.Body, j.BodyOmitted = r.Status, r.Header, r.Body, r.BodyOmitted
	}
	return j
}

// Queue is a queue's Stats with its name: gauges, then this process's
// counters. Ages are in seconds.
type Queue struct {
	Name             string  `json:"name"`
	Depth            uint64  `json:"depth"`
	Ready            uint64  `json:"ready"`
	InFlight         uint64  `json:"in_flight"`
	Delayed          uint64  `json:"delayed"`
	Waiting          uint64  `json:"waiting"`
	Dead             uint64  `json:"dead"`
	Bytes            uint64  `json:"bytes"`
	OldestVisibleAge float64 `json:"oldest_visible_age_seconds"`
	OldestAge        float64 `json:"oldest_age_seconds"`
	Enqueued         uint64  `json:"enqueued"`
	Duplicates       uint64  `json:"duplicates"`
	Acked            uint64  `json:"acked"`
	Nacked           uint64  `json:"nacked"`
	Expired          uint64  `json:"expired"`
	DeadLettered     uint64  `json:"dead_lettered"`
	Redriven         uint64  `json:"redriven"`
	Dropped          uint64  `json:"dropped"`
	// Keys lists the queue's ordering keys, when asked for.
	Keys []OrderingKey `json:"ordering_keys,omitempty"`
}

// QueueOf is the queue name's Stats as a Queue.
func QueueOf(name string, s queue.Stats) Queue {
	return Queue{Name: name, Depth: s.Depth, Ready: s.Ready, InFlight: s.InFlight, Delayed: s.Delayed,
		Waiting: s.Waiting, Dead: s.Dead, Bytes: s.Bytes, OldestVisibleAge: s.OldestVisibleAge.Seconds(),
		OldestAge: s.OldestAge.Seconds(), Enqueued: s.Enqueued, Duplicates: s.Duplicates, Acked: s.Acked,
		Nacked: s.Nacked, Expired: s.Expired, DeadLettered: s.DeadLettered, Redriven: s.Redriven, Dropped: s.Dropped}
}

// OrderingKey is what a queue holds of one ordering key.
type OrderingKey struct {
	Key      Text   `json:"key"`
	Messages int    `json:"messages"`
	Head     uint64 `json:"head"`
	Held     bool   `json:"held,omitempty"`
}

// OrderingKeyOf is k as an OrderingKey.
func OrderingKeyOf(k queue.OrderingKey) OrderingKey {
	return OrderingKey{Key: Text(k.Key), Messages: k.Messages, Head: k.Head, Held: k.Held}
}
