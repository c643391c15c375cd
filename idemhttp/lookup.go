package idemhttp

import (
	"bytes"
	"net/http"

	"github.com/oncekv/oncekv"
)

// ErrBadRecord: a stored response does not decode (damage, or the mark of
// another handler). A replay of it answers 500.
var ErrBadRecord = errBadRecord

// RecordKey returns the oncekv key of the mark a middleware keeps for an
// Idempotency-Key sent by the caller scope: the hex of the first 16 bytes
// of the SHA-256 of scope, a slash, and the key as the client sent it
// (unquoted). The mark's handler is Options.Handler ("idemhttp" by
// default): oncekv mark PATH idemhttp KEY shows it, and Lookup decodes it.
func RecordKey(scope, key string) string { return storeKey(scope, key) }

// Record is a stored answer, decoded: what every replay sends.
type Record struct {
	Status int
	// Header holds the replayed headers (the allowlist), without
	// Idempotent-Replayed, which every replay adds.
	Header http.Header
	Body   []byte
	// BodyOmitted: the body passed Options.MaxRecordBytes and was not
	// stored; a replay sends an empty body and
	// Idempotent-Replay-Body-Omitted: true.
	BodyOmitted bool
}

// ParseRecord decodes a stored answer: the Response of a DONE mark of a
// middleware's handler. Errors: ErrBadRecord.
func ParseRecord(b []byte) (*Record, error) {
	d, err := decodeRecord(b)
	if err != nil {
		return nil, err
	}
	r := &Record{Status: d.status, Header: http.Header{}, Body: bytes.Clone(d.body), BodyOmitted: d.omitted}
	for _, h := range d.headers {
		r.Header.Add(h.name, h.value)
	}
	return r, nil
}

// Stored is what a middleware's store holds for one (scope, key).
type Stored struct {
	// Mark is the key's oncekv mark: its state (IN_PROGRESS while a
	// request with the key runs, DONE once answered), when it was first
	// seen, the lease of a running request.
	Mark oncekv.MarkInfo
	// Record is the stored answer of a DONE mark; nil otherwise.
	Record *Record
}

// Lookup returns what the store holds for the Idempotency-Key key sent by
// the caller scope, under the middleware's handler: "was this request
// processed, and what did it get?" Errors: oncekv.ErrNotFound when the key
// has no record (never sent, expired, or answered with DoNotStore);
// ErrBadRecord; the store's.
func (m *Middleware) Lookup(scope, key string) (*Stored, error) {
	return Lookup(m.db, m.opts.Handler, scope, key)
}

// Lookup is Middleware.Lookup for a store without a middleware (an
// operator's tool): handler is the middleware's Options.Handler, ""
// meaning DefaultHandler.
func Lookup(db *oncekv.DB, handler, scope, key string) (*Stored, error) {
	if handler == "" {
		handler = DefaultHandler
	}
	mi, err := db.Mark(handler, RecordKey(scope, key))
	if err != nil {
		return nil, err
	}
	s := &Stored{Mark: mi}
	if mi.State == oncekv.MarkDone {
		if s.Record, err = ParseRecord(mi.Response); err != nil {
			return s, err
		}
	}
	return s, nil
}
