package oncekv_test

import (
	"context"
	"encoding/json"
	"expvar"
	"fmt"
	"os"
	"path/filepath"

	"github.com/oncekv/oncekv"
)

// ExamplePublish shows the store's Stats under /debug/vars (import
// "expvar" and serve http.DefaultServeMux, or mount expvar.Handler()).
func ExamplePublish() {
	dir, _ := os.MkdirTemp("", "oncekv-example-")
	defer os.RemoveAll(dir)
	db, err := oncekv.Open(filepath.Join(dir, "store.db"), nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if err := oncekv.Publish("oncekv_example", db); err != nil {
		panic(err)
	}
	req := oncekv.Request{Handler: "orders", Key: "order-1", Payload: []byte("pay 10")}
	for range 2 {
		if _, err := db.Apply(context.Background(), req, nil); err != nil {
			panic(err)
		}
	}

	var st oncekv.Stats // what /debug/vars shows under "oncekv_example"
	if err := json.Unmarshal([]byte(expvar.Get("oncekv_example").String()), &st); err != nil {
		panic(err)
	}
	fmt.Println("applied", st.Total.Applied, "duplicates", st.Total.DuplicatesSuppressed, "live marks", st.LiveMarks)
	fmt.Println("file on disk", st.File.Size > 0, "open readers", st.File.OpenReadTxs)

	// A second Publish of the name, for another open store, is an error, not
	// expvar's panic.
	other, err := oncekv.Open(filepath.Join(dir, "other.db"), nil)
	if err != nil {
		panic(err)
	}
	defer other.Close()
	fmt.Println(oncekv.Publish("oncekv_example", other) != nil)
	// Output:
	// applied 1 duplicates 1 live marks 1
	// file on disk true open readers 0
	// true
}
