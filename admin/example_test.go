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

// mountAdmin is the snippet of docs/queues-and-admin.md: the handler on
// the program's mux, behind the program's own check.
func mountAdmin(db *oncekv.DB, mux *http.ServeMux, requireOperator func(http.Handler) http.Handler) error {
	h, err := admin.New(db, nil)
	if err != nil {
		return err
	}
	mux.Handle("/debug/oncekv/", http.StripPrefix("/debug/oncekv", requireOperator(h)))
	return nil
}

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
	if err := mountAdmin(db, mux, requireOperator); err != nil {
		log.Fatal(err)
	}

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
