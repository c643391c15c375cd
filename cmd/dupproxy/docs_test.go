package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/dupproxy"
)

// TestDocsCommandLines runs the command lines of docs/dupproxy.md and
// docs/testing-your-handlers.md (the blocks after their markers) as
// written, with three flags added at the end, which the flag package lets
// win: -upstream (a test server), -listen and -admin (free ports). It sends
// a POST /orders with a key through the proxy and stops it: the command
// must exit 0, print the report with the route's row, and write -json.
func TestDocsCommandLines(t *testing.T) {
	for _, doc := range []string{"docs/dupproxy.md", "docs/testing-your-handlers.md"} {
		t.Run(filepath.Base(doc), func(t *testing.T) {
			block := docBlock(t, doc, "<!-- checked: run by TestDocsCommandLines in cmd/dupproxy -->")
			words := shellWords(t, block)
			require.Greater(t, len(words), 3, block)
			require.Equal(t, []string{"go", "run", "./cmd/dupproxy"}, words[:3], "the block runs the command")
			args := words[3:]
			_, err := parse(args, io.Discard)
			require.NoError(t, err, "the doc's flags as written")

			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Location", "/orders/1")
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, `{"id":"1","created_at":"now"}`)
			}))
			t.Cleanup(up.Close)
			t.Chdir(t.TempDir()) // a relative -json lands here
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			addrs := make(chan string, 1)
			var stdout, stderr syncBuffer
			done := make(chan int, 1)
			go func() {
				done <- run(ctx, append(args, "-upstream", up.URL, "-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0"),
					&stdout, &stderr, func(proxy, _ string) { addrs <- proxy })
			}()
			var proxy string
			select {
			case proxy = <-addrs:
			case code := <-done:
				t.Fatalf("the command exited %d: %s", code, stderr.String())
			}
			req, err := http.NewRequest(http.MethodPost, "http://"+proxy+"/orders", strings.NewReader(`{"item":"tea"}`))
			require.NoError(t, err)
			req.Header.Set("Idempotency-Key", "order-key-1")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusCreated, resp.StatusCode)
			cancel()
			require.Equal(t, 0, <-done, stderr.String())
			out := stdout.String()
			require.Regexp(t, `(?m)^POST /orders +(-|with key|without key) +1 `, out) // a key column only once a copy went
			require.Regexp(t, `1 requests forwarded, 1 eligible, [01] copied`, out)
			for i, a := range args {
				if a == "-json" {
					b, err := os.ReadFile(args[i+1])
					require.NoError(t, err)
					var r dupproxy.Report
					require.NoError(t, json.Unmarshal(b, &r))
					require.NotEmpty(t, r.Routes)
				}
			}
		})
	}
}

// docBlock returns the code block that follows the line marker in the
// repository's file doc (a path from the repository's root).
func docBlock(t *testing.T, doc, marker string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(doc)))
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(src), marker+"\n```")
	require.True(t, ok, "%s has no code block after %q", doc, marker)
	_, rest, ok = strings.Cut(rest, "\n")
	require.True(t, ok)
	block, _, ok := strings.Cut(rest, "```\n")
	require.True(t, ok, "the block after %q in %s does not end", marker, doc)
	return block
}

// shellWords splits a one-command shell block into its words as sh does
// for the forms the docs use: blanks, backslash-newline, single and
// double quotes.
func shellWords(t *testing.T, block string) []string {
	t.Helper()
	block = strings.ReplaceAll(block, "\\\n", " ")
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(block); i++ {
		switch c := block[i]; {
		case c == '\'' || c == '"':
			end := strings.IndexByte(block[i+1:], c)
			require.GreaterOrEqual(t, end, 0, "an unclosed quote in %q", block)
			w.WriteString(block[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			require.NotContains(t, "&|;<>$`\\", string(c), "the block is one plain command: %q", block)
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}
