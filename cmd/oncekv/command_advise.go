package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/dumpfile"
)

func init() {
	register(&command{
		name: "advise", short: "how late duplicates come, against the dedup window",
		args: "PATH", nargs: 1,
		summary: "Print, for each handler, how late its duplicates came after their key's first\n" +
			"delivery (p50, p99 and max, from every process that closed the store cleanly), how\n" +
			"many met only a tombstone or came after every record was gone, against Retention\n" +
			"and TombstoneRetention, with a plain sentence when the margin is thin. The windows\n" +
			"are those the program saved with the figures, unless -retention or\n" +
			"-tombstone-retention say otherwise. p50 and p99 are upper bounds: the bucket they\n" +
			"fall in.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.register(fs, true, false)
			var retention, tombstones time.Duration
			fs.DurationVar(&retention, "retention", 0, "judge by this Retention (default: the one saved with the figures)")
			fs.DurationVar(&tombstones, "tombstone-retention", -1, "judge by this TombstoneRetention, 0 for none (default: the one saved)")
			return func(out io.Writer, args []string) error {
				return runAdvise(&sf, out, args[0], retention, tombstones)
			}
		},
	})
}

// adviceJSON is one handler's line of advise -json.
type adviceJSON struct {
	Handler             dumpfile.Text `json:"handler"`
	Duplicates          uint64        `json:"duplicates"`
	P50                 float64       `json:"p50_seconds"`
	P99                 float64       `json:"p99_seconds"`
	Max                 float64       `json:"max_seconds"`
	TombstoneDuplicates uint64        `json:"tombstone_duplicates"`
	LateDuplicates      uint64        `json:"late_duplicates"`
	Retention           float64       `json:"retention_seconds"`
	TombstoneRetention  float64       `json:"tombstone_retention_seconds"`
	// Verdict is "late", "tombstones", "thin", "comfortable" or "unknown".
	Verdict string `json:"verdict"`
	Advice  string `json:"advice"`
	label   string // the handler as the text output prints it
}

// otherHandlersRow names the handlers past the store's cap in advise.
const otherHandlersRow = "(other handlers)"

func runAdvise(sf *storeFlags, out io.Writer, path string, retention, tombstones time.Duration) (err error) {
	db, err := sf.open(path, true)
	if err != nil {
		return err
	}
	defer closeInto(db, &err)
	r := db.WindowReport()
	if retention > 0 {
		r.Retention = retention
	}
	if tombstones >= 0 {
		r.TombstoneRetention = tombstones
	}
	names := make([]string, 0, len(r.Handlers))
	for h := range r.Handlers {
		names = append(names, h)
	}
	sort.Strings(names)
	rows := make([]adviceJSON, 0, len(names)+1)
	for _, h := range names {
		rows = append(rows, advice(printable([]byte(h)), h, r.Handlers[h], r))
	}
	if o := r.Other; o.DuplicateAges.Count > 0 || o.LateDuplicates > 0 {
		rows = append(rows, advice(otherHandlersRow, otherHandlersRow, o, r))
	}
	if sf.json {
		for _, row := range rows {
			if err := writeJSON(out, row); err != nil {
				return err
			}
		}
		return nil
	}
	saved := "never saved: the figures are this open's only (none)"
	if !r.SavedAt.IsZero() {
		saved = "saved " + stamp(r.SavedAt)
	}
	fmt.Fprintf(out, "Retention %s, TombstoneRetention %s; figures %s\n\n", span(r.Retention), tombText(r.TombstoneRetention), saved)
	if len(rows) == 0 {
		fmt.Fprintln(out, "no duplicates seen yet: nothing to judge the window by")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HANDLER\tDUPLICATES\tP50\tP99\tMAX\tFROM TOMBSTONES\tLATE")
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%d\t<=%s\t<=%s\t%s\t%d\t%d\n", row.label, row.Duplicates, secondsSpan(row.P50), secondsSpan(row.P99), secondsSpan(row.Max),
			row.TombstoneDuplicates, row.LateDuplicates)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	for _, row := range rows {
		fmt.Fprintf(out, "%s: %s\n", row.label, row.Advice)
	}
	return nil
}

// advice judges one handler's figures against the windows, in a sentence.
func advice(label, name string, w oncekv.HandlerWindow, r oncekv.WindowReport) adviceJSON {
	a := w.DuplicateAges
	row := adviceJSON{Handler: dumpfile.Text(name), Duplicates: a.Count, P50: a.Quantile(0.5).Seconds(), P99: a.Quantile(0.99).Seconds(),
		Max: a.Max.Seconds(), TombstoneDuplicates: w.TombstoneDuplicates, LateDuplicates: w.LateDuplicates,
		Retention: r.Retention.Seconds(), TombstoneRetention: r.TombstoneRetention.Seconds(), label: label}
	p99, latest := a.Quantile(0.99), a.Max
	switch {
	case w.LateDuplicates > 0:
		row.Verdict = "late"
		keep, last := "Retention", r.Retention
		if r.TombstoneRetention > 0 {
			keep, last = "TombstoneRetention", r.TombstoneRetention
		}
		row.Advice = fmt.Sprintf("%s after every record of its key was gone (after %s, %s) and was applied again, "+
			"an estimate from Bloom filters: the window is too short for this handler; lengthen %s.",
			count(w.LateDuplicates, "duplicate came", "duplicates came"), keep, span(last), keep)
	case w.TombstoneDuplicates > 0:
		row.Verdict = "tombstones"
		row.Advice = fmt.Sprintf("%s after Retention (%s) and met only a tombstone: suppressed, but without the "+
			"stored response; to give every duplicate its response, make Retention longer than %s.",
			count(w.TombstoneDuplicates, "duplicate came", "duplicates came"), span(r.Retention), span(latest))
	case a.Count == 0:
		row.Verdict = "unknown"
		row.Advice = "no duplicates seen yet: nothing to judge the window by."
	case p99 > r.Retention/2 || latest > r.Retention*3/4:
		row.Verdict = "thin"
		row.Advice = fmt.Sprintf("the margin is thin: 1 in 100 duplicates comes as late as %s, %s of Retention (%s), and the "+
			"latest came after %s; lengthen Retention, or set TombstoneRetention, before some come too late.",
			span(min(p99, latest)), share(min(p99, latest), r.Retention), span(r.Retention), span(latest))
	default:
		row.Verdict = "comfortable"
		row.Advice = fmt.Sprintf("comfortable: 99 in 100 duplicates come within %s, and the latest came after %s, %s of Retention %s.",
			span(min(p99, latest)), span(latest), share(latest, r.Retention), span(r.Retention))
	}
	return row
}

// count is "n one" or "n many", by n.
func count(n uint64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// share is d as a percentage of of.
func share(d, of time.Duration) string {
	if of <= 0 {
		return "?%"
	}
	p := 100 * float64(d) / float64(of)
	if p < 10 {
		return fmt.Sprintf("%.1f%%", p)
	}
	return fmt.Sprintf("%.0f%%", p)
}

// span prints a duration for a person: whole days as "7d", else Go's
// form rounded to the second.
func span(d time.Duration) string {
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	s := d.Round(time.Second).String()
	for _, zero := range []string{"h0m0s", "m0s"} {
		if strings.HasSuffix(s, zero) {
			s = strings.TrimSuffix(s, zero) + zero[:1]
		}
	}
	return s
}

func secondsSpan(s float64) string { return span(time.Duration(s * float64(time.Second))) }

func tombText(d time.Duration) string {
	if d <= 0 {
		return "off"
	}
	return span(d)
}
