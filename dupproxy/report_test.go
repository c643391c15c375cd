package dupproxy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/dupproxy"
)

// flaggedReport is the report of three deposits through the proxy to a
// bank that is not idempotent, with copies with and without the key (the
// two copies of a deposit race each other).
func flaggedReport(t *testing.T) (*dupproxy.Proxy, dupproxy.Report) {
	_, up := newBank(t, false)
	p, srv := newProxy(t, up.URL, dupproxy.Options{Mask: volatile, Keys: dupproxy.BothKeys})
	for i := range 3 {
		post(t, srv.URL, "42", fmt.Sprint("key-", i), fmt.Sprint("t", i), 10)
		settle(t, p) // the copies before the next request: the balances in the examples follow
	}
	return p, settle(t, p)
}

// The text table has a row per route and kind of copy, then the examples.
func TestReportAsText(t *testing.T) {
	_, r := flaggedReport(t)
	var b strings.Builder
	require.NoError(t, r.WriteText(&b))
	lines := strings.Split(b.String(), "\n")
	require.Equal(t, []string{"ROUTE", "KEY", "REQUESTS", "COPIES", "DIFFERED", "5XX", "CONFLICTS", "ERRORS"}, strings.Fields(lines[0]))
	require.Equal(t, []string{"POST", "/accounts/{id}/deposits", "with", "key", "3", "3", "3", "0", "0", "0"}, strings.Fields(lines[1]))
	require.Equal(t, []string{"POST", "/accounts/{id}/deposits", "without", "key", "3", "3", "3", "0", "0", "0"}, strings.Fields(lines[2]))
	require.Contains(t, b.String(), "  POST /accounts/{id}/deposits, with key: POST /accounts/42/deposits: body $.balance: 10 vs ")
	require.Contains(t, b.String(), "3 requests forwarded, 3 eligible, 3 copied; not copied: 0 over MaxBody, 0 while busy")
}

// The JSON report decodes back to the report.
func TestReportAsJSON(t *testing.T) {
	_, r := flaggedReport(t)
	var b strings.Builder
	require.NoError(t, r.WriteJSON(&b))
	var back dupproxy.Report
	require.NoError(t, json.Unmarshal([]byte(b.String()), &back))
	require.Equal(t, r, back)
	require.Contains(t, b.String(), `"5xx": 0`)
}

// The metrics are the text exposition format: HELP and TYPE for each
// family, then samples with escaped labels; the handler serves all three
// formats.
func TestReportAsPrometheusMetrics(t *testing.T) {
	p, r := flaggedReport(t)
	var b strings.Builder
	require.NoError(t, r.WriteMetrics(&b))
	samples := map[string]string{}
	families := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			f := strings.Fields(name)
			require.Equal(t, "counter", f[1])
			families[f[0]] = true
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		samples[line[:i]] = line[i+1:]
	}
	for _, f := range []string{"dupproxy_requests_total", "dupproxy_route_requests_total", "dupproxy_copies_total",
		"dupproxy_differed_total", "dupproxy_copy_5xx_total", "dupproxy_conflicts_total", "dupproxy_copy_errors_total",
		"dupproxy_not_copied_total"} {
		require.True(t, families[f], f)
	}
	require.Equal(t, "3", samples[`dupproxy_differed_total{route="POST /accounts/{id}/deposits",key="with key"}`])
	require.Equal(t, "3", samples[`dupproxy_copies_total{route="POST /accounts/{id}/deposits",key="without key"}`])
	require.Equal(t, "3", samples[`dupproxy_requests_total`])
	require.Equal(t, "0", samples[`dupproxy_not_copied_total{reason="busy"}`])

	srv := httptest.NewServer(p.Handler())
	t.Cleanup(srv.Close)
	for path, want := range map[string]string{
		"/metrics":            "# TYPE dupproxy_copies_total counter",
		"/report.json":        `"routes": [`,
		"/report":             "ROUTE",
		"/?format=prometheus": "dupproxy_differed_total{",
	} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		body := readAll(t, resp)
		require.Contains(t, body, want, path)
	}
}

// Label values are escaped as the format wants.
func TestMetricLabelsAreEscaped(t *testing.T) {
	r := dupproxy.Report{Routes: []dupproxy.RouteReport{{Route: "POST /a\"b\\c\nd", Key: dupproxy.WithKey, Copies: 1}}}
	var b strings.Builder
	require.NoError(t, r.WriteMetrics(&b))
	require.Contains(t, b.String(), `dupproxy_copies_total{route="POST /a\"b\\c\nd",key="with key"} 1`)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var b strings.Builder
	_, err := bufio.NewReader(resp.Body).WriteTo(&b)
	require.NoError(t, err)
	return b.String()
}
