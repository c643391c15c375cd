package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/dupproxy"
)

// syncBuffer is an io.Writer safe to read while run writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The command end to end on 127.0.0.1: it forwards, copies every request
// to a counter that is not idempotent, serves the report while it runs,
// and prints it (and writes the JSON) when it stops.
func TestTheCommandFlagsACounterAndReportsOnStop(t *testing.T) {
	var mu sync.Mutex
	count := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		count++
		fmt.Fprintf(w, `{"count":%d,"at":"%d"}`, count, count*7)
	}))
	t.Cleanup(up.Close)
	jsonPath := filepath.Join(t.TempDir(), "report.json")
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan [2]string, 1)
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-upstream", up.URL, "-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0",
			"-fraction", "1", "-mask", "$.at", "-json", jsonPath, "-route", "POST /counters/{id}"},
			&stdout, &stderr, func(proxy, admin string) { addrs <- [2]string{proxy, admin} })
	}()
	a := <-addrs
	for range 3 {
		resp, err := http.Post("http://"+a[0]+"/counters/1", "application/json", nil)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Contains(t, string(body), `"count":`)
	}
	resp, err := http.Get("http://" + a[0] + "/not-copied")
	require.NoError(t, err)
	resp.Body.Close()
	require.Eventually(t, func() bool { // the copies are answered after the client's
		resp, err := http.Get("http://" + a[1] + "/metrics")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(b), `dupproxy_differed_total{route="POST /counters/{id}",key="without key"} 3`)
	}, timeout, tick)
	cancel()
	require.Equal(t, 0, <-done, stderr.String())
	out := stdout.String()
	require.Contains(t, out, "POST /counters/{id}  without key  3         3       3")
	require.Regexp(t, `POST /counters/1: body \$\.count: \d+ vs \d+ \(both 200\)`, out) // the copies race the next requests
	require.Contains(t, out, "4 requests forwarded, 3 eligible, 3 copied")
	require.Contains(t, stderr.String(), "dupproxy: forwarding http://127.0.0.1:")
	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var r dupproxy.Report
	require.NoError(t, json.Unmarshal(b, &r))
	require.Equal(t, uint64(3), r.Routes[0].Differed)
}

// Bad command lines exit 2 and say what is wrong.
func TestBadCommandLines(t *testing.T) {
	for args, want := range map[string]string{
		"":                                    "-upstream is required",
		"-upstream http://x -mode sometimes":  `mode "sometimes"`,
		"-upstream http://x -key forget":      `key mode "forget"`,
		"-upstream http://x -fraction 2":      "Fraction = 2",
		"-upstream http://x -mask $.a[":       `Mask "$.a["`,
		"-upstream http://x extra":            "unexpected arguments",
		"-upstream http://x -listen bad:addr": "-listen",
	} {
		var stdout, stderr syncBuffer
		ctx, cancel := context.WithTimeout(context.Background(), timeout) // none of them may serve
		code := run(ctx, strings.Fields(args), &stdout, &stderr, nil)
		cancel()
		require.Equal(t, 2, code, args)
		require.Contains(t, stderr.String(), want, args)
	}
}

// timeout and tick bound the waits for the copies, which are answered
// after the client's requests.
const (
	timeout = 30 * time.Second
	tick    = 10 * time.Millisecond
)
