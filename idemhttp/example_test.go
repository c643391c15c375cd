package idemhttp_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
)

// A payments endpoint behind the middleware (httpGuide, the code of
// docs/http.md): the retry of a POST gets the first answer back, the order
// row commits with it, and the gateway is charged once; another caller's
// same key is another record.
func ExampleNew() {
	db, done := exampleDB()
	defer done()
	var charged []string
	charge := func(key string) error { charged = append(charged, key); return nil }
	mux := http.NewServeMux()
	if err := httpGuide(db, mux, charge); err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, user := range []string{"alice", "alice", "bob"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":1200}`))
		req.Header.Set("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
		req.Header.Set("X-User", user) // the authenticated caller; a header stands in for a session
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(user, resp.StatusCode, resp.Header.Get("Location"), string(body), "replayed:", resp.Header.Get("Idempotent-Replayed") == "true")
	}
	fmt.Println("charges:", len(charged), "distinct keys:", len(charged) == 2 && charged[0] != charged[1])
	// Output:
	// alice 201 /orders/order-1 receipt R-1 replayed: false
	// alice 201 /orders/order-1 receipt R-1 replayed: true
	// bob 201 /orders/order-1 receipt R-1 replayed: false
	// charges: 2 distinct keys: true
}

// The middleware's method value is the usual func(http.Handler)
// http.Handler, for routers that chain middlewares.
func ExampleMiddleware_Wrap() {
	db, done := exampleDB()
	defer done()
	mw, err := idemhttp.New(db, &idemhttp.Options{
		Scope:      func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil },
		RequireKey: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	var chain func(http.Handler) http.Handler = mw.Wrap
	h := chain(http.NotFoundHandler())

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/payments", nil))
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	// Output:
	// 400 application/problem+json
}

// httpGuide is the code block of docs/http.md, verbatim (the root's
// TestDocsCodeBlocks compares them); ExampleNew runs it.
func httpGuide(db *oncekv.DB, mux *http.ServeMux, charge func(key string) error) error {
	mw, err := idemhttp.New(db, &idemhttp.Options{
		// Required: records are kept per (caller, key), never shared.
		Scope: func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil },
	})
	if err != nil {
		return err
	}
	payments := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The gateway deduplicates on idemhttp.Key(r), stable across retries;
		// idemhttp.Token(r) is the claim's fencing token, new at a takeover.
		if err := charge(idemhttp.Key(r)); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway) // a 5xx is not stored: the retry runs again
			return
		}
		err := idemhttp.Stage(r, func(tx *oncekv.Tx) error { // commits with the stored 201
			b, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err != nil {
				return err
			}
			return b.Put([]byte("order-1"), []byte("paid"))
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Location", "/orders/order-1")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "receipt R-1")
	})
	mux.Handle("/payments", mw.Wrap(payments)) // mw.Wrap is a func(http.Handler) http.Handler
	return nil
}

// exampleDB opens a store in a fresh temporary directory; done closes it
// and removes the directory.
func exampleDB() (db *oncekv.DB, done func()) {
	dir, err := os.MkdirTemp("", "idemhttp-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err = oncekv.Open(filepath.Join(dir, "shop.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	return db, func() {
		_ = db.Close()
		_ = os.RemoveAll(dir)
	}
}

// The package doc's snippet: a payments route behind the middleware on a
// mux.
func Example_mount() {
	db, done := exampleDB()
	defer done()
	userID := func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }
	payments := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})
	mux := http.NewServeMux()

	mw, err := idemhttp.New(db, &idemhttp.Options{
		Scope: func(r *http.Request) (string, error) { return userID(r) },
	})
	if err != nil {
		log.Fatal(err)
	}
	mux.Handle("/payments", mw.Wrap(payments))

	req := httptest.NewRequest(http.MethodPost, "/payments", nil)
	req.Header.Set("Idempotency-Key", "k-1")
	req.Header.Set("X-User", "alice")
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	fmt.Println(rec.Code)
	// Output:
	// 201
}

// A refusal found before any effect is answered without being stored: the
// corrected request runs under the same key.
func ExampleDoNotStore() {
	db, done := exampleDB()
	defer done()
	mw, err := idemhttp.New(db, &idemhttp.Options{Scope: func(r *http.Request) (string, error) { return "alice", nil }})
	if err != nil {
		log.Fatal(err)
	}
	notes := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if len(body) == 0 {
			_ = idemhttp.DoNotStore(r) // validation failed: no effect, nothing to keep
			http.Error(w, "empty note", http.StatusUnprocessableEntity)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	for _, body := range []string{"", "buy milk"} {
		req := httptest.NewRequest(http.MethodPost, "/notes", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "note-1")
		rec := httptest.NewRecorder()
		notes.ServeHTTP(rec, req)
		fmt.Println(rec.Code)
	}
	// Output:
	// 422
	// 201
}

// Lookup answers "what did this client's request get?" from the scope and
// the Idempotency-Key it sent.
func ExampleLookup() {
	db, done := exampleDB()
	defer done()
	mw, err := idemhttp.New(db, &idemhttp.Options{Scope: func(r *http.Request) (string, error) { return "alice", nil }})
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/orders/7")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "receipt R-7")
	}))
	req := httptest.NewRequest(http.MethodPost, "/orders", nil)
	req.Header.Set("Idempotency-Key", "order-7")
	h.ServeHTTP(httptest.NewRecorder(), req)

	s, err := idemhttp.Lookup(db, "", "alice", "order-7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Mark.State, s.Record.Status, s.Record.Header.Get("Location"), string(s.Record.Body))
	// Output:
	// DONE 201 /orders/7 receipt R-7
}
