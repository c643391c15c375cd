package prometheus_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/oncekv/oncekv"
	oncekvprom "github.com/oncekv/oncekv/prometheus"
)

func ExampleNew() {
	dir, _ := os.MkdirTemp("", "oncekv-example-")
	defer os.RemoveAll(dir)
	db, err := oncekv.Open(filepath.Join(dir, "store.db"), nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()

	c, err := oncekvprom.New(db, &oncekvprom.Options{MaxHandlers: 50})
	if err != nil {
		panic(err)
	}
	reg := prom.NewRegistry() // or prom.MustRegister(c) on the default one
	reg.MustRegister(c)

	req := oncekv.Request{Handler: "orders", Key: "order-1", Payload: []byte("pay 10")}
	for range 3 { // one delivery, two redeliveries
		if _, err := db.Apply(context.Background(), req, nil); err != nil {
			panic(err)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		switch f.GetName() {
		case "oncekv_duplicates_suppressed_total", "oncekv_live_marks":
			m := f.GetMetric()[0]
			labels := ""
			for _, l := range m.GetLabel() {
				labels += l.GetName() + "=" + l.GetValue()
			}
			fmt.Println(f.GetName(), labels, m.GetCounter().GetValue()+m.GetGauge().GetValue())
		}
	}
	// Output:
	// oncekv_duplicates_suppressed_total handler=orders 2
	// oncekv_live_marks  1
}
