package dupproxy

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
)

// The kinds of copy, as the report names them.
const (
	WithKey    = "with key"
	WithoutKey = "without key"
)

// Report is what the proxy saw, as of when it was taken.
type Report struct {
	// Requests is how many requests were forwarded, copied or not.
	Requests uint64 `json:"requests"`
	// Eligible is how many of them matched a route (or a method) and
	// could have been copied; Copied how many got at least one copy.
	Eligible uint64 `json:"eligible"`
	Copied   uint64 `json:"copied"`
	// SkippedLarge is how many requests drawn for a copy were not copied
	// because their body was over MaxBody; SkippedBusy because
	// MaxInFlight copies were running.
	SkippedLarge uint64 `json:"skipped_large"`
	SkippedBusy  uint64 `json:"skipped_busy"`
	// Routes has a row per route and kind of copy, in route order.
	Routes []RouteReport `json:"routes"`
}

// RouteReport is one route's copies of one kind (WithKey or WithoutKey),
// or a route's requests when none was copied yet (Key "-").
type RouteReport struct {
	Route string `json:"route"`
	Key   string `json:"key"`
	// Requests is how many requests of the route were forwarded (the same
	// in the route's two rows).
	Requests uint64 `json:"requests"`
	// Copies is how many copies were answered and compared (or failed:
	// Errors).
	Copies uint64 `json:"copies"`
	// Differed is how many copies got another answer than their original.
	Differed uint64 `json:"differed"`
	// Server5xx is how many copies were answered 5xx.
	Server5xx uint64 `json:"5xx"`
	// Conflicts is how many concurrent copies were still answered with
	// ConflictStatus after the original's answer.
	Conflicts uint64 `json:"conflicts"`
	// Errors is how many copies did not reach the upstream.
	Errors uint64 `json:"errors"`
	// Examples are the first differences seen, at most MaxExamples.
	Examples []Example `json:"examples,omitempty"`
}

// Example is one copy whose answer differed.
type Example struct {
	Method     string `json:"method"`
	Path       string `json:"path"`
	Original   int    `json:"original_status"`
	Copy       int    `json:"copy_status"`
	Difference string `json:"difference"`
}

// Flagged reports whether the row shows a route that is not idempotent
// for its kind of copy: an answer that differed, or a 5xx.
func (r *RouteReport) Flagged() bool { return r.Differed > 0 || r.Server5xx > 0 }

// WriteText writes the report as a table, a row per route and kind of
// copy, each followed by its examples.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ROUTE\tKEY\tREQUESTS\tCOPIES\tDIFFERED\t5XX\tCONFLICTS\tERRORS\n")
	for _, row := range r.Routes {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", row.Route, row.Key, row.Requests, row.Copies,
			row.Differed, row.Server5xx, row.Conflicts, row.Errors)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, row := range r.Routes {
		for _, e := range row.Examples {
			both := ""
			if e.Original == e.Copy {
				both = fmt.Sprintf(" (both %d)", e.Original)
			}
			if _, err := fmt.Fprintf(w, "  %s, %s: %s %s: %s%s\n", row.Route, row.Key, e.Method, e.Path,
				e.Difference, both); err != nil {
				return err
			}
		}
	}
	_, err := fmt.Fprintf(w, "%d requests forwarded, %d eligible, %d copied; not copied: %d over MaxBody, %d while busy\n",
		r.Requests, r.Eligible, r.Copied, r.SkippedLarge, r.SkippedBusy)
	return err
}

// WriteJSON writes the report as one JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(r)
}

// stats is the live report.
type stats struct {
	maxRoutes, maxExamples int

	mu struct {
		sync.Mutex
		requests, eligible, copied, large, busy uint64
		// routes is keyed by route names: from Options.Routes, or folded
		// paths capped at maxRoutes (then otherRoutes).
		routes map[string]*routeStats
	}
}

type routeStats struct {
	requests uint64
	kinds    map[string]*RouteReport // WithKey, WithoutKey: at most two
}

func newStats(maxRoutes, maxExamples int) *stats {
	s := &stats{maxRoutes: maxRoutes, maxExamples: maxExamples}
	s.mu.routes = map[string]*routeStats{}
	return s
}

// routeLocked returns the stats of route, or of otherRoutes once
// maxRoutes routes have some.
func (s *stats) routeLocked(route string) (string, *routeStats) {
	rs, ok := s.mu.routes[route]
	if ok {
		return route, rs
	}
	if len(s.mu.routes) >= s.maxRoutes {
		route = otherRoutes
		if rs, ok := s.mu.routes[route]; ok {
			return route, rs
		}
	}
	rs = &routeStats{kinds: map[string]*RouteReport{}}
	s.mu.routes[route] = rs
	return route, rs
}

// forwarded counts a request; route is "" for one that is not eligible.
func (s *stats) forwarded(route string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.requests++
	if route == "" {
		return
	}
	s.mu.eligible++
	_, rs := s.routeLocked(route)
	rs.requests++
}

// skipped counts an eligible request drawn for a copy and not copied.
func (s *stats) skipped(large bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if large {
		s.mu.large++
	} else {
		s.mu.busy++
	}
}

func (s *stats) copiedRequest() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.copied++
}

// copyResult is what one copy came to.
type copyResult struct {
	route, kind    string
	method, path   string
	orig, copy     *answer
	difference     string
	conflict, fail bool
}

// record counts a copy's result.
func (s *stats) record(c *copyResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name, rs := s.routeLocked(c.route)
	row, ok := rs.kinds[c.kind]
	if !ok {
		row = &RouteReport{Route: name, Key: c.kind}
		rs.kinds[c.kind] = row
	}
	row.Copies++
	switch {
	case c.fail:
		row.Errors++
		return
	case c.conflict:
		row.Conflicts++
		return
	}
	if c.copy.status >= 500 {
		row.Server5xx++
	}
	if c.difference == "" {
		return
	}
	row.Differed++
	if len(row.Examples) < s.maxExamples {
		row.Examples = append(row.Examples, Example{Method: c.method, Path: c.path,
			Original: c.orig.status, Copy: c.copy.status, Difference: c.difference})
	}
}

// report returns a copy of the live report, rows in route order and
// WithKey before WithoutKey.
func (s *stats) report() Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := Report{Requests: s.mu.requests, Eligible: s.mu.eligible, Copied: s.mu.copied,
		SkippedLarge: s.mu.large, SkippedBusy: s.mu.busy}
	for name, rs := range s.mu.routes {
		if len(rs.kinds) == 0 { // requests, none copied yet
			r.Routes = append(r.Routes, RouteReport{Route: name, Key: "-", Requests: rs.requests})
		}
		for _, row := range rs.kinds {
			c := *row
			c.Requests = rs.requests
			c.Examples = slices.Clone(row.Examples)
			r.Routes = append(r.Routes, c)
		}
	}
	slices.SortFunc(r.Routes, func(a, b RouteReport) int {
		if c := strings.Compare(a.Route, b.Route); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key) // "with key" < "without key"
	})
	return r
}
