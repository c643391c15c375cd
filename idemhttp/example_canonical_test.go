package idemhttp_test

import (
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/oncekv/oncekv/idemhttp"
)

// A JSON API whose clients re-serialise a body when they retry it: behind
// WrapCanonicalJSON the retry, members in another order and 1.0 for 1, is
// replayed, and only a changed value is key reuse.
func ExampleMiddleware_WrapCanonicalJSON() {
	db, done := exampleDB()
	defer done()
	mw, err := idemhttp.New(db, &idemhttp.Options{
		Scope: func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil },
	})
	if err != nil {
		log.Fatal(err)
	}
	runs := 0
	h := mw.WrapCanonicalJSON(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "payment %d", runs)
	}))
	for _, body := range []string{
		`{"amount": 1200, "currency": "EUR"}`,
		`{"currency":"EUR","amount":1200.0}`,
		`{"currency":"EUR","amount":1300}`,
	} {
		req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "c0ffee")
		req.Header.Set("X-User", "alice")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		switch {
		case w.Code == http.StatusUnprocessableEntity:
			var problem struct{ Type string }
			_ = json.Unmarshal(w.Body.Bytes(), &problem)
			fmt.Println(w.Code, problem.Type)
		case w.Header().Get("Idempotent-Replayed") == "true":
			fmt.Println(w.Code, w.Body.String(), "(replayed)")
		default:
			fmt.Println(w.Code, w.Body.String())
		}
	}
	// Output:
	// 201 payment 1
	// 201 payment 1 (replayed)
	// 422 urn:oncekv:idemhttp:key-reuse
}
