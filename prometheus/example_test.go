package prometheus_test

import (
	"context"
	"expvar"
	"fmt"
	"os"
	"path/filepath"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/oncekv/oncekv"
	oncekvprom "github.com/oncekv/oncekv/prometheus"
	"github.com/oncekv/oncekv/queue"
)

func ExampleNew() {
	db, done := exampleDB()
	defer done()

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

// metricsGuide is the code block of docs/metrics.md, verbatim (the root's
// TestDocsCodeBlocks compares them); Example_guide runs it.
func metricsGuide(db *oncekv.DB, q *queue.Queue, reg *prom.Registry) error {
	c, err := oncekvprom.New(db, nil) // Options.MaxHandlers: 100 handlers get series of their own
	if err != nil {
		return err
	}
	if err := c.AddQueue(q); err != nil { // a name added twice is ErrQueueAdded
		return err
	}
	reg.MustRegister(c) // or prometheus.MustRegister(c), on the default registry

	// expvar instead, or as well: the standard library's /debug/vars.
	return oncekv.Publish("oncekv", db) // ErrPublish if the name is taken
}

// Example_guide runs docs/metrics.md's code: a store and one queue behind
// one collector, and the store on expvar too.
func Example_guide() {
	db, done := exampleDB()
	defer done()
	q, err := queue.Open(db, "outbox", nil)
	if err != nil {
		panic(err)
	}
	defer q.Close()
	if _, err := q.Enqueue(context.Background(), queue.Message{Key: "order-1", Body: []byte("o-1")}); err != nil {
		panic(err)
	}

	reg := prom.NewRegistry()
	if err := metricsGuide(db, q, reg); err != nil {
		panic(err)
	}
	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		if f.GetName() == "oncekv_queue_depth" {
			m := f.GetMetric()[0]
			fmt.Println(f.GetName(), m.GetLabel()[0].GetName()+"="+m.GetLabel()[0].GetValue(), m.GetGauge().GetValue())
		}
	}
	fmt.Println("expvar:", expvar.Get("oncekv") != nil)
	// Output:
	// oncekv_queue_depth queue=outbox 1
	// expvar: true
}

// exampleDB opens a store in a fresh temporary directory; done closes it
// and removes the directory.
func exampleDB() (db *oncekv.DB, done func()) {
	dir, err := os.MkdirTemp("", "oncekv-example-")
	if err != nil {
		panic(err)
	}
	db, err = oncekv.Open(filepath.Join(dir, "store.db"), nil)
	if err != nil {
		panic(err)
	}
	return db, func() {
		_ = db.Close()
		_ = os.RemoveAll(dir)
	}
}
