package edgeagent

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
)

// readingsBucket holds, per reading id, how many times the server applied
// it: one, if the deduplication works.
var readingsBucket = []byte("readings")

// Server is the ingest endpoint: POST a Reading with an Idempotency-Key
// and "Authorization: Device <name>".
type Server struct {
	db *oncekv.DB
	h  http.Handler
}

// NewServer returns an ingest server storing readings in db.
func NewServer(db *oncekv.DB) (*Server, error) {
	if err := db.Update(func(tx *oncekv.Tx) error {
		_, err := tx.CreateBucketIfNotExists(readingsBucket)
		return err
	}); err != nil {
		return nil, err
	}
	mw, err := idemhttp.New(db, &idemhttp.Options{Scope: deviceScope, RequireKey: true})
	if err != nil {
		return nil, err
	}
	s := &Server{db: db}
	s.h = mw.Wrap(http.HandlerFunc(s.ingest))
	return s, nil
}

// deviceScope identifies the caller; a real server would check a
// certificate or a token here.
func deviceScope(r *http.Request) (string, error) {
	dev, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Device ")
	if !ok || dev == "" {
		return "", errors.New("no device")
	}
	return dev, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.h.ServeHTTP(w, r) }

// ingest applies one reading: its write commits with the stored answer.
func (s *Server) ingest(w http.ResponseWriter, r *http.Request) {
	var rd Reading
	if err := json.NewDecoder(r.Body).Decode(&rd); err != nil || rd.ID == "" {
		http.Error(w, "not a reading", http.StatusUnprocessableEntity)
		return
	}
	err := idemhttp.Stage(r, func(tx *oncekv.Tx) error {
		b := tx.Bucket(readingsBucket)
		n, _ := binary.Uvarint(b.Get([]byte(rd.ID)))
		return b.Put([]byte(rd.ID), binary.AppendUvarint(nil, n+1))
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

// Applied returns how many times each reading was applied.
func (s *Server) Applied() (map[string]uint64, error) {
	m := map[string]uint64{}
	err := s.db.View(func(tx *oncekv.Tx) error {
		return tx.Bucket(readingsBucket).ForEach(func(k, v []byte) error {
			n, _ := binary.Uvarint(v)
			m[string(k)] = n
			return nil
		})
	})
	return m, err
}
