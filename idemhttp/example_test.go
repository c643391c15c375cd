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

// A payments endpoint behind the middleware: the retry of a POST gets the
// first answer back, and the order row commits with it.
func ExampleNew() {
	db, done := exampleDB()
	defer done()

	mw, err := idemhttp.New(db, &idemhttp.Options{
		// The authenticated caller; here a header stands in for a session.
		Scope: func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil },
	})
	if err != nil {
		log.Fatal(err)
	}
	charges := 0
	payments := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++ // an external call would get idemhttp.Key(r) to deduplicate
		err := idemhttp.Stage(r, func(tx *oncekv.Tx) error {
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
	srv := httptest.NewServer(mw.Wrap(payments))
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":1200}`))
		req.Header.Set("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
		req.Header.Set("X-User", "alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("Location"), string(body), "replayed:", resp.Header.Get("Idempotent-Replayed") == "true")
	}
	fmt.Println("charges:", charges)
	// Output:
	// 201 /orders/order-1 receipt R-1 replayed: false
	// 201 /orders/order-1 receipt R-1 replayed: true
	// charges: 1
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
// TestDocsCodeBlocks compares them); Example_guide runs it.
func httpGuide(db *oncekv.DB, mux *http.ServeMux) error {
	mw, err := idemhttp.New(db, &idemhttp.Options{
		// Required: records are kept per (caller, key), never shared.
		Scope: func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil },
	})
	if err != nil {
		return err
	}
	payments := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// idemhttp.Key(r) goes to the gateway as its idempotency key (stable
		// across retries); idemhttp.Token(r) is the claim's fencing token.
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

// Example_guide runs docs/http.md's code: a POST and its retry with the
// same key and caller get one answer, and another caller's same key is
// another record.
func Example_guide() {
	db, done := exampleDB()
	defer done()
	mux := http.NewServeMux()
	if err := httpGuide(db, mux); err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, user := range []string{"alice", "alice", "bob"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":1200}`))
		req.Header.Set("Idempotency-Key", "pay-1")
		req.Header.Set("X-User", user)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(user, resp.StatusCode, "replayed:", resp.Header.Get("Idempotent-Replayed") == "true")
	}
	// Output:
	// alice 201 replayed: false
	// alice 201 replayed: true
	// bob 201 replayed: false
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
