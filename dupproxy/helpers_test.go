package dupproxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/dupproxy"
	"github.com/oncekv/oncekv/idemhttp"
)

// bank is the upstream of the tests: POST /accounts/{id}/deposits adds
// {"amount": n} to the account and answers 201 with the new balance, the
// time and a request id (two volatile fields), a deliberately
// non-idempotent handler. With idem, it runs behind idemhttp, its write
// staged with the stored answer. It logs every request it gets.
type bank struct {
	db *oncekv.DB
	// hold, if set, is what the first deposit waits for, inside the
	// handler (after idemhttp claimed its key).
	hold    chan struct{}
	held    atomic.Bool
	entered chan struct{} // closed when the first deposit is held

	mu struct {
		sync.Mutex
		balance map[string]int64 // a few test accounts
		seq     int
		seen    []seenRequest
	}
}

// seenRequest is one request the upstream got and what it answered.
type seenRequest struct {
	trace  string // the client's X-Trace
	header http.Header
	body   string
}

// newBank starts the upstream on 127.0.0.1.
func newBank(t *testing.T, idem bool) (*bank, *httptest.Server) {
	t.Helper()
	return newBankWith(t, idem, nil, nil)
}

// newBankWith is newBank with hold (see bank) and outer, a middleware
// around everything (idemhttp included).
func newBankWith(t *testing.T, idem bool, hold chan struct{}, outer func(http.Handler) http.Handler) (*bank, *httptest.Server) {
	t.Helper()
	b := &bank{hold: hold, entered: make(chan struct{})}
	b.mu.balance = map[string]int64{}
	var h http.Handler = http.HandlerFunc(b.deposit)
	if idem {
		db, err := oncekv.Open(filepath.Join(t.TempDir(), "bank.db"), &oncekv.Options{NoSync: true})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, db.Close()) })
		b.db = db
		mw, err := idemhttp.New(db, &idemhttp.Options{
			Scope: func(r *http.Request) (string, error) { return "tester", nil },
		})
		require.NoError(t, err)
		h = mw.Wrap(h)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /accounts/{id}/deposits", h)
	mux.HandleFunc("GET /accounts/{id}", func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		defer b.mu.Unlock()
		fmt.Fprintf(w, `{"balance":%d}`, b.mu.balance[r.PathValue("id")])
	})
	var root http.Handler = mux
	if outer != nil {
		root = outer(mux)
	}
	srv := httptest.NewServer(root)
	t.Cleanup(srv.Close)
	return b, srv
}

func (b *bank) deposit(w http.ResponseWriter, r *http.Request) {
	if b.hold != nil && b.held.CompareAndSwap(false, true) {
		close(b.entered)
		<-b.hold
	}
	var in struct{ Amount int64 }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	b.mu.Lock()
	b.mu.balance[r.PathValue("id")] += in.Amount
	b.mu.seq++
	body := fmt.Sprintf(`{"account":%q,"balance":%d,"at":%q,"request_id":"req-%d"}`,
		r.PathValue("id"), b.mu.balance[r.PathValue("id")], time.Now().Format(time.RFC3339Nano), b.mu.seq)
	b.mu.seen = append(b.mu.seen, seenRequest{trace: r.Header.Get("X-Trace"), header: r.Header.Clone(), body: body})
	b.mu.Unlock()
	if b.db != nil {
		// The write that commits with the stored answer (or on its own,
		// for a request without a key); the balance above stands in for
		// it, so that the test can read it.
		write := func(tx *oncekv.Tx) error {
			bk, err := tx.CreateBucketIfNotExists([]byte("deposits"))
			if err != nil {
				return err
			}
			return bk.Put([]byte(r.Header.Get("X-Trace")), []byte(body))
		}
		err := idemhttp.Stage(r, write)
		if errors.Is(err, idemhttp.ErrNoClaim) {
			err = b.db.Update(write)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/accounts/"+r.PathValue("id"))
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, body)
}

// seen returns the requests the upstream got with trace.
func (b *bank) seen(trace string) []seenRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []seenRequest
	for _, s := range b.mu.seen {
		if s.trace == trace {
			out = append(out, s)
		}
	}
	return out
}

// newProxy starts a dupproxy to upstream on 127.0.0.1, with every request
// copied unless o says otherwise.
func newProxy(t *testing.T, upstream string, o dupproxy.Options) (*dupproxy.Proxy, *httptest.Server) {
	t.Helper()
	u, err := url.Parse(upstream)
	require.NoError(t, err)
	o.Upstream = u
	if o.Fraction == 0 {
		o.Fraction = 1
	}
	p, err := dupproxy.New(&o)
	require.NoError(t, err)
	srv := httptest.NewServer(p)
	t.Cleanup(func() {
		srv.Close()
		require.NoError(t, p.Close())
	})
	return p, srv
}

// reply is what the client got.
type reply struct {
	status int
	header http.Header
	body   string
}

// post sends one deposit through base, with key unless it is "".
func post(t *testing.T, base, account, key, trace string, amount int) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/accounts/"+account+"/deposits",
		strings.NewReader(fmt.Sprintf(`{"amount":%d}`, amount)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Trace", trace)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// settle waits for the proxy's copies to be answered and recorded.
func settle(t *testing.T, p *dupproxy.Proxy) dupproxy.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, p.Wait(ctx))
	return p.Report()
}

// row returns the report's row of route and key.
func row(t *testing.T, r dupproxy.Report, route, key string) dupproxy.RouteReport {
	t.Helper()
	for _, row := range r.Routes {
		if row.Route == route && row.Key == key {
			return row
		}
	}
	t.Fatalf("no row %q %q in %+v", route, key, r.Routes)
	return dupproxy.RouteReport{}
}
