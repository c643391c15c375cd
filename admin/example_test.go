package admin_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/admin"
)

// Example mounts the handler behind the program's own authentication, as
// the package doc's snippet does.
func Example() {
	dir, err := os.MkdirTemp("", "admin-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := oncekv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	h, err := admin.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	requireOperator := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, pass, ok := r.BasicAuth(); !ok || pass != "s3cret" { // your own check
				http.Error(w, "operators only", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	mux := http.NewServeMux()

	mux.Handle("/debug/oncekv/", http.StripPrefix("/debug/oncekv", requireOperator(h)))

	for _, pass := range []string{"guess", "s3cret"} {
		req := httptest.NewRequest(http.MethodGet, "/debug/oncekv/stats", nil)
		req.SetBasicAuth("ops", pass)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	}
	// Output:
	// 401 text/plain; charset=utf-8
	// 200 application/json
}
