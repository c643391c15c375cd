package dupproxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// WriteMetrics writes the report as Prometheus metrics, in the text
// exposition format (version 0.0.4): counters labelled by route and key
// (WithKey, WithoutKey) for the copies, differences, 5xx, conflicts and
// errors; by route for the requests; by reason for the requests not
// copied.
func (r *Report) WriteMetrics(w io.Writer) error {
	bw := bufio.NewWriter(w)
	counter := func(name, help string) {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s counter\n", name, help, name)
	}
	counter("dupproxy_requests_total", "Requests forwarded.")
	fmt.Fprintf(bw, "dupproxy_requests_total %d\n", r.Requests)
	counter("dupproxy_route_requests_total", "Requests forwarded, by route (eligible ones only).")
	seen := map[string]bool{} // bounded by the report's routes
	for _, row := range r.Routes {
		if !seen[row.Route] {
			seen[row.Route] = true
			fmt.Fprintf(bw, "dupproxy_route_requests_total{route=%s} %d\n", label(row.Route), row.Requests)
		}
	}
	for _, m := range []struct {
		name, help string
		value      func(*RouteReport) uint64
	}{
		{"dupproxy_copies_total", "Copies sent, by route and key.", func(r *RouteReport) uint64 { return r.Copies }},
		{"dupproxy_differed_total", "Copies whose answer differed from the original's.", func(r *RouteReport) uint64 { return r.Differed }},
		{"dupproxy_copy_5xx_total", "Copies answered 5xx.", func(r *RouteReport) uint64 { return r.Server5xx }},
		{"dupproxy_conflicts_total", "Concurrent copies still answered 409 after the original's answer.", func(r *RouteReport) uint64 { return r.Conflicts }},
		{"dupproxy_copy_errors_total", "Copies that did not reach the upstream.", func(r *RouteReport) uint64 { return r.Errors }},
	} {
		counter(m.name, m.help)
		for i := range r.Routes {
			row := &r.Routes[i]
			if row.Key == "-" {
				continue
			}
			fmt.Fprintf(bw, "%s{route=%s,key=%s} %d\n", m.name, label(row.Route), label(row.Key), m.value(row))
		}
	}
	counter("dupproxy_not_copied_total", "Requests drawn for a copy and forwarded without one, by reason.")
	fmt.Fprintf(bw, "dupproxy_not_copied_total{reason=\"body_over_max\"} %d\n", r.SkippedLarge)
	fmt.Fprintf(bw, "dupproxy_not_copied_total{reason=\"busy\"} %d\n", r.SkippedBusy)
	return bw.Flush()
}

// label quotes a label value as the exposition format wants: backslash,
// double quote and newline escaped.
func label(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v) + `"`
}

// Handler serves the report: the text table at any path, JSON when the
// path ends in ".json" or the query has format=json, the Prometheus
// metrics at a path ending in "/metrics" or with format=prometheus.
func (p *Proxy) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r := p.Report()
		format := req.URL.Query().Get("format")
		switch {
		case format == "json" || strings.HasSuffix(req.URL.Path, ".json"):
			w.Header().Set("Content-Type", "application/json")
			_ = r.WriteJSON(w)
		case format == "prometheus" || strings.HasSuffix(req.URL.Path, "/metrics"):
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			_ = r.WriteMetrics(w)
		default:
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_ = r.WriteText(w)
		}
	})
}
