package main

import (
	"flag"
	"io"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/dumpfile"
)

func init() {
	register(&command{
		name: "dump", short: "write marks and user buckets as JSON lines",
		args: "PATH", nargs: 1,
		summary: "Write the store's marks and user buckets to standard output as JSON lines, for\n" +
			"moving a store between machines (see load) and for debugging, with every number a\n" +
			"promise rests on: token counters (claims, NextFence, queue deliveries), the fences\n" +
			"and versions of user keys (deleted ones too) and bucket sequences.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.register(fs, false, false)
			return func(out io.Writer, args []string) error { return runDump(&sf, out, args[0]) }
		},
	})
}

func runDump(sf *storeFlags, out io.Writer, path string) (err error) {
	db, err := sf.open(path, true)
	if err != nil {
		return err
	}
	defer closeInto(db, &err)
	w := dumpfile.NewWriter(out)
	err = db.Marks(oncekv.MarkFilter{}, func(m oncekv.MarkInfo) error {
		return w.Write(&dumpfile.Line{Type: dumpfile.TypeMark, Mark: m})
	})
	if err != nil {
		return err
	}
	err = db.View(func(tx *oncekv.Tx) error {
		return tx.ForEachBucket(func(name []byte) error {
			b := tx.Bucket(name)
			if err := w.Write(&dumpfile.Line{Type: dumpfile.TypeBucket, Bucket: name, Sequence: b.Sequence()}); err != nil {
				return err
			}
			return b.ForEach(func(k, v []byte) error {
				return w.Write(&dumpfile.Line{Type: dumpfile.TypeKV, Bucket: name, Key: k, Value: v,
					Fence: b.Fence(k), Version: b.Version(k)})
			})
		})
	})
	if err != nil {
		return err
	}
	// After the keys, so that a load puts each value before raising what
	// its key carries.
	err = db.KeyFences(func(f oncekv.KeyFence) error {
		if !f.Deleted {
			return nil // on its kv line
		}
		return w.Write(&dumpfile.Line{Type: dumpfile.TypeFence, Bucket: f.Bucket, Key: f.Key, Fence: f.Fence, Version: f.Version})
	})
	if err != nil {
		return err
	}
	err = db.TokenCounters(func(c oncekv.TokenCounter) error {
		return w.Write(&dumpfile.Line{Type: dumpfile.TypeCounter, Resource: c.Resource, Last: c.Last})
	})
	if err != nil {
		return err
	}
	return w.Flush()
}
