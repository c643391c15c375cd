package main

import (
	"encoding/binary"
	"flag"
	"io"
	"slices"
	"strings"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/dumpfile"
	"github.com/oncekv/oncekv/queue"
)

func init() {
	register(&command{
		name: "dump", short: "write marks and user buckets as JSON lines",
		args: "PATH", nargs: 1,
		summary: "Write the store's marks and user buckets to standard output as JSON lines, for\n" +
			"moving a store between machines (see load) and for debugging, with every number a\n" +
			"promise rests on: token counters (claims, NextFence, queue deliveries), the fences\n" +
			"and versions of user keys (deleted ones too) and bucket sequences. The records it knows\n" +
			"get a \"decoded\" member beside their bytes, for a person (load ignores it): queue\n" +
			"messages and dead letters, and the HTTP records of idemhttp (-http-handler). PATH may be\n" +
			"an admin handler's URL.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.register(fs, false, false)
			sf.registerRemote(fs)
			http := stringList{vals: []string{idemhttp.DefaultHandler}}
			fs.Var(&http, "http-handler", "a handler whose marks are idemhttp records (repeatable)")
			return func(out io.Writer, args []string) error { return runDump(&sf, out, args[0], http) }
		},
	})
}

func runDump(sf *storeFlags, out io.Writer, path string, httpHandlers stringList) (err error) {
	db, err := sf.open(path, true)
	if err != nil {
		return err
	}
	defer closeInto(db, &err)
	w := dumpfile.NewWriter(out)
	err = db.Marks(oncekv.MarkFilter{}, func(m oncekv.MarkInfo) error {
		l := &dumpfile.Line{Type: dumpfile.TypeMark, Mark: m}
		if m.State == oncekv.MarkDone && slices.Contains(httpHandlers.vals, m.Handler) {
			if r, err := idemhttp.ParseRecord(m.Response); err == nil {
				l.Decoded = dumpfile.AnswerOf(r)
			}
		}
		return w.Write(l)
	})
	if err != nil {
		return err
	}
	readers, err := queueReaders(db)
	if err != nil {
		return err
	}
	// The store is open read-only: the views' read transactions beside
	// this one wait for no writer.
	err = db.View(func(tx *oncekv.Tx) error {
		return tx.ForEachBucket(func(name []byte) error {
			b := tx.Bucket(name)
			if err := w.Write(&dumpfile.Line{Type: dumpfile.TypeBucket, Bucket: name, Sequence: b.Sequence()}); err != nil {
				return err
			}
			read := readers[string(name)]
			return b.ForEach(func(k, v []byte) error {
				l := &dumpfile.Line{Type: dumpfile.TypeKV, Bucket: name, Key: k, Value: v,
					Fence: b.Fence(k), Version: b.Version(k)}
				if read != nil && len(k) == 8 {
					if m, err := read(binary.BigEndian.Uint64(k)); err == nil {
						l.Decoded = dumpfile.MessageOf(m)
					}
				}
				return w.Write(l)
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

// queueReaders returns, for the bucket of each queue's live messages and
// of its dead letters, how to read one of them by ID.
func queueReaders(db *oncekv.DB) (map[string]func(id uint64) (*queue.Message, error), error) {
	names, err := queue.Names(db)
	if err != nil {
		return nil, err
	}
	readers := map[string]func(uint64) (*queue.Message, error){}
	for _, name := range names {
		v, err := queue.NewView(db, name)
		if err != nil {
			return nil, err
		}
		readers["oncekv.queue."+name+".m"] = v.Message
		readers["oncekv.queue."+name+".d"] = v.DeadLetter
	}
	return readers, nil
}

// stringList is a repeatable string flag whose first use replaces its
// default.
type stringList struct {
	vals []string
	set  bool
}

func (l *stringList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(l.vals, ",")
}

func (l *stringList) Set(v string) error {
	if !l.set {
		l.vals, l.set = nil, true
	}
	l.vals = append(l.vals, v)
	return nil
}
