package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/dumpfile"
	"github.com/oncekv/oncekv/queue"
)

func init() {
	register(&command{
		name: "stats", short: "what the store holds: file, windows, marks, claims, buckets",
		args: "PATH", nargs: 1,
		summary: "Show what the store holds: file size and free space, windows, live marks and the age\n" +
			"of the oldest (by its first-seen time), claims in progress, marks per handler and state,\n" +
			"queues (see queues for more) and user buckets with their keys. PATH may be an admin\n" +
			"handler's URL.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.register(fs, true, false)
			return func(out io.Writer, args []string) error { return runStats(&sf, out, args[0]) }
		},
	})
}

// maxHandlers bounds the per-handler counts stats keeps: handler names come
// from the file, and a store with millions of distinct ones must not take
// the tool's memory. The marks of the handlers past it are counted under
// otherHandlers.
const maxHandlers = 1000

const otherHandlers = "(other handlers)"

type statsJSON struct {
	File struct {
		Size         int64 `json:"size_bytes"`
		HighWater    int64 `json:"high_water_bytes"`
		PageSize     int   `json:"page_size"`
		FreeBytes    int64 `json:"free_bytes"`
		FreePages    int   `json:"free_pages"`
		PendingPages int   `json:"pending_pages"`
	} `json:"file"`
	LiveMarks     uint64            `json:"live_marks"`
	OldestMarkAge float64           `json:"oldest_mark_age_seconds"`
	Claims        uint64            `json:"claims_in_progress"`
	States        map[string]uint64 `json:"marks_by_state"`
	Handlers      map[string]uint64 `json:"marks_by_handler"`
	Windows       []windowJSON      `json:"windows"`
	Queues        []dumpfile.Queue  `json:"queues"`
	Buckets       []bucketJSON      `json:"user_buckets"`
}

type windowJSON struct {
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
	Marks       uint64    `json:"marks"`
	FilterBytes int       `json:"filter_bytes,omitempty"`
}

type bucketJSON struct {
	Name dumpfile.Text `json:"name"`
	Keys int           `json:"keys"`
}

func runStats(sf *storeFlags, out io.Writer, path string) (err error) {
	db, err := sf.open(path, true)
	if err != nil {
		return err
	}
	defer closeInto(db, &err)
	st := db.Stats()
	var j statsJSON
	j.File.Size, j.File.HighWater, j.File.PageSize = st.File.Size, st.File.HighWater, st.File.PageSize
	j.File.FreePages, j.File.PendingPages = st.File.FreePages, st.File.PendingPages
	// From the pages: bbolt computes Stats.File.FreeBytes at a writable
	// commit, which a read-only open never makes.
	j.File.FreeBytes = int64(st.File.FreePages+st.File.PendingPages) * int64(st.File.PageSize)
	j.LiveMarks = st.LiveMarks
	j.Windows = windowsJSON(st.Windows)
	j.States, j.Handlers = map[string]uint64{}, map[string]uint64{}
	// The oldest mark's own age, by its first-seen time: Stats.OldestMarkAge
	// is that of its window's start, up to a WindowSpan older.
	var oldest time.Time
	err = db.Marks(oncekv.MarkFilter{}, func(m oncekv.MarkInfo) error {
		if oldest.IsZero() || m.FirstSeen.Before(oldest) {
			oldest = m.FirstSeen
		}
		j.States[m.State.String()]++
		if _, ok := j.Handlers[m.Handler]; ok || len(j.Handlers) < maxHandlers {
			j.Handlers[m.Handler]++
		} else {
			j.Handlers[otherHandlers]++
		}
		return nil
	})
	if err != nil {
		return err
	}
	var markAge time.Duration
	if !oldest.IsZero() {
		markAge = max(db.Now().Sub(oldest), 0)
	}
	j.OldestMarkAge = markAge.Seconds()
	j.Claims = j.States[oncekv.MarkInProgress.String()]
	queueBuckets := map[string]bool{}
	if j.Queues, err = queuesOf(db, queueBuckets); err != nil {
		return err
	}
	if j.Buckets, err = userBuckets(db, queueBuckets); err != nil {
		return err
	}
	if sf.json {
		return writeJSON(out, j)
	}
	return printStats(out, &j, markAge)
}

// queueSuffixes are the buckets of a queue, after its name.
var queueSuffixes = []string{".m", ".v", ".w", ".l", ".g", ".d", ".s"}

// queuesOf returns the Stats of every queue of db, and marks its buckets
// in buckets, so that they are not listed as user buckets.
func queuesOf(db *oncekv.DB, buckets map[string]bool) ([]dumpfile.Queue, error) {
	names, err := queue.Names(db)
	if err != nil {
		return nil, err
	}
	list := []dumpfile.Queue{}
	for _, name := range names {
		v, err := queue.NewView(db, name)
		if err != nil {
			return nil, err
		}
		st, err := v.Stats()
		if err != nil {
			return nil, err
		}
		list = append(list, dumpfile.QueueOf(name, st))
		for _, s := range queueSuffixes {
			buckets["oncekv.queue."+name+s] = true
		}
	}
	return list, nil
}

func windowsJSON(ws []oncekv.WindowStats) []windowJSON {
	out := make([]windowJSON, 0, len(ws))
	for _, w := range ws {
		out = append(out, windowJSON{Start: w.Start.UTC(), End: w.End.UTC(), Marks: w.Marks, FilterBytes: w.FilterBytes})
	}
	return out
}

// userBuckets counts the keys of every user bucket but those of skip.
func userBuckets(db *oncekv.DB, skip map[string]bool) (list []bucketJSON, err error) {
	err = db.View(func(tx *oncekv.Tx) error {
		return tx.ForEachBucket(func(name []byte) error {
			if skip[string(name)] {
				return nil
			}
			n := 0
			if err := tx.Bucket(name).ForEach(func(_, _ []byte) error { n++; return nil }); err != nil {
				return err
			}
			list = append(list, bucketJSON{Name: append(dumpfile.Text{}, name...), Keys: n})
			return nil
		})
	})
	return list, err
}

func printStats(out io.Writer, j *statsJSON, age time.Duration) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "file size\t%d bytes\n", j.File.Size)
	fmt.Fprintf(tw, "high water\t%d bytes (page size %d)\n", j.File.HighWater, j.File.PageSize)
	fmt.Fprintf(tw, "free\t%d bytes (%d free pages, %d pending)\n", j.File.FreeBytes, j.File.FreePages, j.File.PendingPages)
	fmt.Fprintf(tw, "live marks\t%d\n", j.LiveMarks)
	fmt.Fprintf(tw, "oldest mark age\t%v\n", age)
	fmt.Fprintf(tw, "claims in progress\t%d\n", j.Claims)
	sep := "marks by state\t"
	for _, s := range []oncekv.MarkState{oncekv.MarkDone, oncekv.MarkFailed, oncekv.MarkInProgress} {
		fmt.Fprintf(tw, "%s%v %d", sep, s, j.States[s.String()])
		sep = ", "
	}
	fmt.Fprintf(tw, "\n\nwindows (%d)\n", len(j.Windows))
	fmt.Fprintln(tw, "  start\tend\tmarks\tfilter bytes")
	for _, w := range j.Windows {
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\n", stamp(w.Start), stamp(w.End), w.Marks, w.FilterBytes)
	}
	fmt.Fprintf(tw, "\nhandlers (%d)\n", len(j.Handlers))
	names := make([]string, 0, len(j.Handlers))
	for h := range j.Handlers {
		names = append(names, h)
	}
	sort.Strings(names)
	for _, h := range names {
		fmt.Fprintf(tw, "  %s\t%d marks\n", printable([]byte(h)), j.Handlers[h])
	}
	if len(j.Queues) > 0 {
		fmt.Fprintf(tw, "\nqueues (%d)\n", len(j.Queues))
		for _, q := range j.Queues {
			fmt.Fprintf(tw, "  %s\t%d live (%d ready, %d in flight, %d delayed, %d waiting), %d dead\n",
				q.Name, q.Depth, q.Ready, q.InFlight, q.Delayed, q.Waiting, q.Dead)
		}
	}
	fmt.Fprintf(tw, "\nuser buckets (%d)\n", len(j.Buckets))
	for _, b := range j.Buckets {
		fmt.Fprintf(tw, "  %s\t%d keys\n", printable(b.Name), b.Keys)
	}
	return tw.Flush()
}
