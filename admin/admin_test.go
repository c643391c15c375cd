package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/admin"
	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/retry"
)

// app is a running program: a store, a queue open with its own options,
// an HTTP endpoint behind idemhttp, and the admin handler.
type app struct {
	db    *oncekv.DB
	q     *queue.Queue
	admin *httptest.Server
}

func newApp(t *testing.T) *app {
	t.Helper()
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "app.db"), &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	q, err := queue.Open(db, "outbox", &queue.Options{Visibility: time.Hour, Retry: &retry.Policy{MaxAttempts: 2}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	ctx := context.Background()
	for _, k := range []string{"edit-1", "edit-2"} {
		_, err := q.Enqueue(ctx, queue.Message{Key: k, Body: []byte("body of " + k), OrderingKey: "note-7"})
		require.NoError(t, err)
	}
	_, err = q.Enqueue(ctx, queue.Message{Key: "other", Body: []byte{0xff}})
	require.NoError(t, err)
	m, err := q.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, q.Nack(ctx, m, oncekv.Permanent(errors.New("422 note locked"))))

	mw, err := idemhttp.New(db, &idemhttp.Options{Scope: func(*http.Request) (string, error) { return "alice", nil }})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("x"))
	req.Header.Set("Idempotency-Key", "order-7")
	mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/orders/7")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "receipt")
	})).ServeHTTP(rec, req)
	require.Equal(t, http.StatusCreated, rec.Code)
	_, err = db.Claim(ctx, oncekv.Request{Handler: "charge", Key: "c-1"}, time.Hour)
	require.NoError(t, err)

	h, err := admin.New(db, &admin.Options{MaxList: 50})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &app{db: db, q: q, admin: srv}
}

func (a *app) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(a.admin.URL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

func (a *app) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	code, b := a.get(t, path)
	require.Equal(t, http.StatusOK, code, string(b))
	require.NoError(t, json.Unmarshal(b, v), string(b))
}

func TestHandlerShowsALiveStore(t *testing.T) {
	a := newApp(t)
	var st struct{ LiveMarks uint64 }
	a.getJSON(t, "/stats", &st)
	require.Positive(t, st.LiveMarks)

	var queues []struct {
		Name    string
		Depth   uint64
		Dead    uint64
		Waiting uint64
		Ready   uint64
		Nacked  uint64
	}
	// (json matches the members case-insensitively: depth, dead, ...)
	a.getJSON(t, "/queues", &queues)
	require.Len(t, queues, 1)
	require.Equal(t, "outbox", queues[0].Name)
	require.Equal(t, []uint64{2, 1, 1, 1, 1}, []uint64{queues[0].Depth, queues[0].Dead, queues[0].Waiting, queues[0].Ready, queues[0].Nacked},
		"the app's gauges and counters: %+v", queues[0])

	var msgs []struct {
		ID          uint64
		Key         string
		OrderingKey string `json:"ordering_key"`
		Body        json.RawMessage
		VisibleAt   *time.Time `json:"visible_at"`
	}
	a.getJSON(t, "/queues/outbox/messages", &msgs)
	require.Len(t, msgs, 2)
	require.Equal(t, "edit-2", msgs[0].Key)
	require.Nil(t, msgs[0].VisibleAt, "held behind the dead edit-1")
	require.JSONEq(t, `{"base64":"/w=="}`, string(msgs[1].Body))
	a.getJSON(t, "/queues/outbox/messages?after=2&limit=1", &msgs)
	require.Len(t, msgs, 1)
	require.Equal(t, "other", msgs[0].Key)

	var dead []struct {
		Key       string
		LastError string `json:"last_error"`
	}
	a.getJSON(t, "/queues/outbox/dead", &dead)
	require.Equal(t, "edit-1", dead[0].Key)
	require.Equal(t, "422 note locked", dead[0].LastError)
	var keys []struct {
		Key      string
		Messages int
		Head     uint64
		Held     bool
	}
	a.getJSON(t, "/queues/outbox/keys?after=note-7", &keys)
	require.Empty(t, keys, "after= is a key")
	a.getJSON(t, "/queues/outbox/keys", &keys)
	require.Len(t, keys, 1)
	require.Equal(t, []any{"note-7", 1, uint64(1), true}, []any{keys[0].Key, keys[0].Messages, keys[0].Head, keys[0].Held})

	var rec struct {
		Mark   struct{ State string }
		Status int
		Header http.Header
		Body   string
	}
	a.getJSON(t, "/http?scope=alice&key=order-7", &rec)
	require.Equal(t, "DONE", rec.Mark.State)
	require.Equal(t, http.StatusCreated, rec.Status)
	require.Equal(t, "/orders/7", rec.Header.Get("Location"))
	require.Equal(t, "receipt", rec.Body)

	code, b := a.get(t, "/claims")
	require.Equal(t, http.StatusOK, code)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 1)
	require.Contains(t, lines[0], `"key":"c-1"`)
	var m struct{ State, Handler string }
	a.getJSON(t, "/mark?handler=charge&key=c-1", &m)
	require.Equal(t, "IN_PROGRESS", m.State)
	code, b = a.get(t, "/marks?handler=idemhttp")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 1, strings.Count(string(b), "\n"))
}

func TestHandlerErrors(t *testing.T) {
	a := newApp(t)
	for path, want := range map[string]int{
		"/queues/nope":                    http.StatusNotFound,
		"/queues/bad%20name/messages":     http.StatusBadRequest,
		"/queues/outbox/messages?limit=0": http.StatusBadRequest,
		"/queues/outbox/dead?limit=51":    http.StatusBadRequest,
		"/queues/outbox/dead?after=x":     http.StatusBadRequest,
		"/mark?handler=h&key=absent":      http.StatusNotFound,
		"/mark":                           http.StatusBadRequest,
		"/marks?state=MAYBE":              http.StatusBadRequest,
		"/http?scope=bob&key=order-7":     http.StatusNotFound,
		"/nothing-here":                   http.StatusNotFound,
	} {
		code, b := a.get(t, path)
		require.Equal(t, want, code, "%s: %s", path, b)
	}
	resp, err := http.Post(a.admin.URL+"/queues/outbox/dead", "text/plain", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	_, err = admin.New(nil, nil)
	require.ErrorIs(t, err, admin.ErrInvalidOptions)
}

// TestBackupIsAWorkingCopyTakenLive: /backup streams a consistent copy
// while the program keeps writing, and the copy opens and holds the data.
func TestBackupIsAWorkingCopyTakenLive(t *testing.T) {
	a := newApp(t)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = a.q.Enqueue(context.Background(), queue.Message{Key: "live-" + time.Now().String(), Body: []byte("x")})
		}
	}()
	resp, err := http.Get(a.admin.URL + "/backup")
	require.NoError(t, err)
	require.Equal(t, "application/octet-stream", resp.Header.Get("Content-Type"))
	path := filepath.Join(t.TempDir(), "copy.db")
	f, err := os.Create(path)
	require.NoError(t, err)
	_, err = io.Copy(f, resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	close(stop)
	<-done
	require.NoError(t, f.Close())

	db, err := oncekv.Open(path, &oncekv.Options{ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	v, err := queue.NewView(db, "outbox")
	require.NoError(t, err)
	require.NoError(t, v.Check(func(p error) error { return p }))
	dead, err := v.DeadLetters(0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	s, err := idemhttp.Lookup(db, "", "alice", "order-7")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, s.Record.Status)
}
