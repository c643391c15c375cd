package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/queue"
)

// queueStore builds the store of the queue commands' tests, on a clock at
// t0: queue "outbox" holds a note's three edits, the first dead-lettered
// by the far side (so the other two are held behind it), a message in
// flight until t0+1h and one delayed until t0+1h; the store also holds an
// idemhttp record of alice's key "order-7".
func queueStore(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "app.db")
	c := &fakeClock{now: t0}
	db := openStore(t, path, c)
	defer func() { require.NoError(t, db.Close()) }()
	fillQueueStore(t, db)
	return path
}

func fillQueueStore(t *testing.T, db *oncekv.DB) {
	t.Helper()
	ctx := context.Background()
	q, err := queue.Open(db, "outbox", &queue.Options{Visibility: time.Hour})
	require.NoError(t, err)
	defer q.Close()
	for _, k := range []string{"edit-1", "edit-2", "edit-3"} {
		_, err := q.Enqueue(ctx, queue.Message{Key: k, Body: []byte("body of " + k), OrderingKey: "note-7"})
		require.NoError(t, err)
	}
	m, err := q.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, q.Nack(ctx, m, oncekv.Permanent(errors.New("http status 422: Note locked"))))
	_, err = q.Enqueue(ctx, queue.Message{Key: "sync", Body: []byte("s")})
	require.NoError(t, err)
	_, err = q.Receive(ctx) // in flight
	require.NoError(t, err)
	_, err = q.Enqueue(ctx, queue.Message{Key: "later", Body: []byte("l"), Delay: time.Hour})
	require.NoError(t, err)

	mw, err := idemhttp.New(db, &idemhttp.Options{Scope: func(*http.Request) (string, error) { return "alice", nil }})
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("2 apples"))
	req.Header.Set("Idempotency-Key", "order-7")
	rec := httptest.NewRecorder()
	mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/orders/7")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "receipt R-7")
	})).ServeHTTP(rec, req)
	require.Equal(t, http.StatusCreated, rec.Code)
}

func TestQueuesCommand(t *testing.T) {
	path := queueStore(t)
	now := at(time.Minute)
	r := cli(t, "queues", path, "-now", now)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `QUEUE\s+DEPTH\s+READY\s+IN FLIGHT\s+DELAYED\s+WAITING\s+DEAD`, r.stdout)
	require.Regexp(t, `outbox\s+4\s+0\s+1\s+1\s+2\s+1\s`, r.stdout)

	r = cli(t, "queues", path, "-now", now, "-json", "-by-key")
	require.Equal(t, 0, r.code, r.stderr)
	var q struct {
		Name                                           string
		Depth, Ready, InFlight, Delayed, Waiting, Dead uint64
		InFlightJSON                                   uint64 `json:"in_flight"`
		Keys                                           []struct {
			Key      string
			Messages int
			Held     bool
		} `json:"ordering_keys"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &q), r.stdout)
	require.Equal(t, "outbox", q.Name)
	require.Equal(t, []uint64{4, 0, 1, 1, 2, 1}, []uint64{q.Depth, q.Ready, q.InFlightJSON, q.Delayed, q.Waiting, q.Dead})
	require.Len(t, q.Keys, 1)
	require.Equal(t, "note-7", q.Keys[0].Key)
	require.True(t, q.Keys[0].Held)

	r = cli(t, "queues", path, "-now", now, "-by-key")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `"note-7"  2         1     held by dead letter 1 (redrive or dead-delete it)`)

	// At t0+2h the lease has run out and the delay passed: both ready.
	r = cli(t, "queues", path, "-now", at(2*time.Hour))
	require.Regexp(t, `outbox\s+4\s+2\s+0\s+0\s+2\s+1\s`, r.stdout)

	// stats names the queue, and lists no bucket of it as a user bucket.
	r = cli(t, "stats", path, "-now", now)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "queues (1)\n  outbox  4 live (0 ready, 1 in flight, 1 delayed, 2 waiting), 1 dead\n")
	require.Contains(t, r.stdout, "user buckets (0)")
	require.NotContains(t, r.stdout, "oncekv.queue.outbox.", "a queue's buckets are the queue's")
}

func TestMessagesAndDeadCommands(t *testing.T) {
	path := queueStore(t)
	now := at(time.Minute)
	r := cli(t, "messages", path, "outbox", "-now", now)
	require.Equal(t, 0, r.code, r.stderr)
	rows := lines(r.stdout)
	require.Len(t, rows, 5, r.stdout)
	require.Regexp(t, `^2\s+"edit-2"\s+"note-7"\s+2024-05-01T10:00:00Z\s+0\s+waiting\s+-\s+-\s+"body of edit-2"`, rows[1])
	require.Regexp(t, `^4\s+"sync"\s+-\s+2024-05-01T10:00:00Z\s+1\s+in flight\s+2024-05-01T11:00:00Z`, rows[3])
	require.Regexp(t, `^5\s+"later"\s+-\s+2024-05-01T10:00:00Z\s+0\s+delayed\s+2024-05-01T11:00:00Z`, rows[4])

	r = cli(t, "messages", path, "outbox", "-json", "-after", "3", "-limit", "1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Len(t, lines(r.stdout), 1)
	var m struct {
		ID         uint64
		Key        string
		Attempt    int
		LeaseUntil time.Time `json:"lease_until"`
		Body       string
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &m))
	require.Equal(t, uint64(4), m.ID)
	require.Equal(t, t0.Add(time.Hour), m.LeaseUntil)

	r = cli(t, "dead", path, "outbox")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `1\s+"edit-1"\s+"note-7"\s+1\s+2024-05-01T10:00:00Z\s+"http status 422: Note locked"\s+"body of edit-1"`, r.stdout)
	r = cli(t, "dead", path, "outbox", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var d struct {
		Key       string
		LastError string `json:"last_error"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &d))
	require.Equal(t, "http status 422: Note locked", d.LastError)

	for _, args := range [][]string{{"messages", path, "nope"}, {"dead", path, "nope"}} {
		r = cli(t, args...)
		require.Equal(t, 1, r.code, r.stdout)
		require.Contains(t, r.stderr, "no such queue")
	}
	r = cli(t, "messages", path, "outbox", "-limit", "0")
	require.Equal(t, 2, r.code)
	r = cli(t, "messages", path, "bad name")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "invalid queue name")
}

// TestRedriveAndDeadDelete: the operator redrives the dead head, which
// goes back first in its key, so the note's edits are delivered in order;
// an ID that is no dead letter is exit 1, and the others are done.
func TestRedriveAndDeadDelete(t *testing.T) {
	path := queueStore(t)
	r := cli(t, "redrive", path, "outbox", "1", "99")
	require.Equal(t, 1, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "outbox: dead letter 1 redriven back at the head of its ordering key")
	require.Contains(t, r.stderr, "message 99")
	require.Equal(t, "", cli(t, "dead", path, "outbox", "-json").stdout)

	c := &fakeClock{now: t0.Add(2 * time.Hour)}
	db := openStore(t, path, c)
	q, err := queue.Open(db, "outbox", nil)
	require.NoError(t, err)
	ctx := context.Background()
	var got []string
	for {
		ms, err := q.Poll(ctx, 1)
		require.NoError(t, err)
		if len(ms) == 0 {
			break
		}
		if ms[0].OrderingKey == "note-7" {
			got = append(got, ms[0].Key)
		}
		if ms[0].Key == "edit-2" { // dead-lettered again, to be deleted
			require.NoError(t, q.Nack(ctx, ms[0], oncekv.Permanent(errors.New("no"))))
			continue
		}
		require.NoError(t, q.Ack(ctx, ms[0]))
	}
	require.Equal(t, []string{"edit-1", "edit-2"}, got, "edit-3 is held by edit-2 now")
	require.NoError(t, q.Close())
	require.NoError(t, db.Close())

	dead := cli(t, "dead", path, "outbox", "-json")
	var d struct{ ID uint64 }
	require.NoError(t, json.Unmarshal([]byte(dead.stdout), &d))
	r = cli(t, "dead-delete", path, "outbox", "x")
	require.Equal(t, 2, r.code)
	r = cli(t, "dead-delete", path, "outbox", jsonID(d.ID))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "outbox: dead letter 2 deleted\n")
	r = cli(t, "messages", path, "outbox", "-now", at(2*time.Hour))
	require.Regexp(t, `3\s+"edit-3"\s+"note-7"\s+\S+\s+0\s+ready`, r.stdout, "deleting the held head lets the next through")
	r = cli(t, "redrive", path, "nope", "1")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "no such queue")
	r = cli(t, "redrive", path, "outbox")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "want at least 3 arguments")
	require.Equal(t, 0, cli(t, "check", path).code)
}

func jsonID(id uint64) string {
	b, _ := json.Marshal(id)
	return string(b)
}

func TestHTTPCommand(t *testing.T) {
	path := queueStore(t)
	r := cli(t, "http", path, "alice", "order-7")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `state\s+DONE\n`, r.stdout)
	require.Regexp(t, `status\s+201\n`, r.stdout)
	require.Regexp(t, `header\s+Location: /orders/7\n`, r.stdout)
	require.Regexp(t, `body\s+"receipt R-7"`, r.stdout)
	require.Contains(t, r.stdout, idemhttp.RecordKey("alice", "order-7"))
	r = cli(t, "http", path, "alice", "order-7", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var rec struct {
		Status int
		Header http.Header
		Body   string
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rec))
	require.Equal(t, 201, rec.Status)
	require.Equal(t, "/orders/7", rec.Header.Get("Location"))
	r = cli(t, "http", path, "bob", "order-7")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "no mark for the key")
}

// TestDumpDecodesSystemRecords: a dump's lines of queue messages, dead
// letters and HTTP records carry a reading of their bytes, which load
// ignores.
func TestDumpDecodesSystemRecords(t *testing.T) {
	path := queueStore(t)
	r := cli(t, "dump", path)
	require.Equal(t, 0, r.code, r.stderr)
	var sawMessage, sawDead, sawHTTP bool
	for _, line := range lines(r.stdout) {
		var l struct {
			Type    string
			Bucket  string
			Handler string
			Decoded json.RawMessage
		}
		require.NoError(t, json.Unmarshal([]byte(line), &l), line)
		switch {
		case l.Bucket == "oncekv.queue.outbox.m" && l.Type == "kv":
			sawMessage = true
			require.Contains(t, string(l.Decoded), `"key":"`)
			require.Contains(t, string(l.Decoded), `"body":"`)
		case l.Bucket == "oncekv.queue.outbox.d" && l.Type == "kv":
			sawDead = true
			require.Contains(t, string(l.Decoded), `"last_error":"http status 422: Note locked"`)
		case l.Handler == "idemhttp":
			sawHTTP = true
			require.JSONEq(t, `{"status":201,"header":{"Location":["/orders/7"]},"body":"receipt R-7"}`, string(l.Decoded))
		}
	}
	require.True(t, sawMessage && sawDead && sawHTTP, r.stdout)
	moved := filepath.Join(t.TempDir(), "moved.db")
	file := filepath.Join(t.TempDir(), "dump.jsonl")
	require.NoError(t, writeFile(file, r.stdout))
	load := cli(t, "load", moved, file, "-now", at(time.Minute))
	require.Equal(t, 0, load.code, load.stderr)
	require.Equal(t, cli(t, "dead", path, "outbox").stdout, cli(t, "dead", moved, "outbox").stdout)
}
