// Command checkout serves the example checkout page on 127.0.0.1:8080 (or
// -addr), with its store in -db.
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/examples/checkout"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	path := flag.String("db", "checkout.db", "oncekv file")
	flag.Parse()
	db, err := oncekv.Open(*path, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	shop, err := checkout.New(db, 500*time.Millisecond)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("checkout on http://%s/", *addr)
	srv := &http.Server{Addr: *addr, Handler: shop.Handler(), ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
