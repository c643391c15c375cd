package dupproxy_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sync"

	"github.com/oncekv/oncekv/dupproxy"
)

// A proxy in front of a counter that is not idempotent: every copy
// counts again, and the report says so.
func ExampleNew() {
	var mu sync.Mutex
	count := 0
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		count++
		fmt.Fprintf(w, `{"count":%d}`, count)
	}))
	defer upstream.Close()

	u, _ := url.Parse(upstream.URL)
	p, err := dupproxy.New(&dupproxy.Options{Upstream: u, Fraction: 1}) // every request copied, for the example
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	front := httptest.NewServer(p)
	defer front.Close()

	for range 2 {
		resp, err := http.Post(front.URL+"/counters/7/increment", "application/json", nil)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		// The copy goes after the answer; wait for it, so that the
		// counts in the output are always the same.
		if err := p.Wait(context.Background()); err != nil {
			log.Fatal(err)
		}
	}
	r := p.Report()
	if err := r.WriteText(os.Stdout); err != nil {
		log.Fatal(err)
	}
	// Output:
	// ROUTE                          KEY          REQUESTS  COPIES  DIFFERED  5XX  CONFLICTS  ERRORS
	// POST /counters/{id}/increment  without key  2         2       2         0    0          0
	//   POST /counters/{id}/increment, without key: POST /counters/7/increment: body $.count: 1 vs 2 (both 200)
	//   POST /counters/{id}/increment, without key: POST /counters/7/increment: body $.count: 3 vs 4 (both 200)
	// 2 requests forwarded, 2 eligible, 2 copied; not copied: 0 over MaxBody, 0 while busy
}
