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
	Mark        Mark        `json:"mark"`
	Status      int         `json:"status,omitempty"`
	Header      http.Header `json:"header,omitempty"`
	Body        Text        `json:"body,omitempty"`
	BodyOmitted bool        `json:"body_omitted,omitempty"`
}

// HTTPRecordOf is s as an HTTPRecord; the mark's raw response is left
// out, as the record decodes it.
func HTTPRecordOf(s *idemhttp.Stored) HTTPRecord {
	j := HTTPRecord{Mark: MarkOf(s.Mark)}
	j.Mark.Response = nil
	if r := s.Record; r != nil {
		j.Status, j.Header, j.Body, j.BodyOmitted = r.Status, r.Header, r.Body, r.BodyOmitted
	}
	return j
}
