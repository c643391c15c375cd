package main

import (
	"bufio"
	"flag"
	"io"

	"github.com/oncekv/oncekv"
)

func init() {
	register(&command{
		name: "dump", short: "write marks and user buckets as JSON lines",
		args: "PATH", nargs: 1,
		summary: "Write the store's marks and user buckets to standard output as JSON lines, for\n" +
			"moving a store between machines (see load) and for debugging. Fences and key\n" +
			"versions of user keys are not dumped.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.register(fs, false, false)
			return func(out io.Writer, args []string) error { return runDump(&sf, out, args[0]) }
		},
	})
}

// The line types of a dump.
const (
	lineMark   = "mark"   // a markJSON
	lineBucket = "bucket" // a user bucket, so that an empty one is kept too
	lineKV     = "kv"     // a key and value of a user bucket
)

// kvJSON is a dump line of a user bucket (lineBucket) or of one of its keys
// (lineKV).
type kvJSON struct {
	Type   string `json:"type"`
	Bucket text   `json:"bucket"`
	Key    *text  `json:"key,omitempty"`
	Value  *text  `json:"value,omitempty"`
}

func runDump(sf *storeFlags, out io.Writer, path string) (err error) {
	db, err := sf.open(path, true)
	if err != nil {
		return err
	}
	defer closeInto(db, &err)
	w := bufio.NewWriter(out)
	err = db.Marks(oncekv.MarkFilter{}, func(m oncekv.MarkInfo) error {
		j := toMarkJSON(m)
		j.Type = lineMark
		return writeJSON(w, j)
	})
	if err != nil {
		return err
	}
	err = db.View(func(tx *oncekv.Tx) error {
		return tx.ForEachBucket(func(name []byte) error {
			if err := writeJSON(w, kvJSON{Type: lineBucket, Bucket: name}); err != nil {
				return err
			}
			return tx.Bucket(name).ForEach(func(k, v []byte) error {
				key, value := text(k), text(v)
				return writeJSON(w, kvJSON{Type: lineKV, Bucket: name, Key: &key, Value: &value})
			})
		})
	})
	if err != nil {
		return err
	}
	return w.Flush()
}
