package jcs_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/jcs"
)

// The tests below hold the package against an ECMAScript engine, Node.js:
// its Number.prototype.toString, JSON.parse and JSON.stringify are what
// RFC 8785 is defined by. They skip, saying so, where node is not
// installed, unless ONCEKV_JCS_NODE=required (as .ci/jcs.sh sets it).

// nodeScript reads lines from stdin and writes one line per line read: in
// "numbers" mode, the double whose bits a line holds in hex, as String()
// writes it; in "documents" mode, a line's JSON canonicalised the RFC's
// way, by JSON.stringify of its scalars and Array.prototype.sort of
// its names (which compares UTF-16 code units).
const nodeScript = `
const mode = process.argv.at(-1);
const view = new DataView(new ArrayBuffer(8));
function canon(v) {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return '[' + v.map(canon).join(',') + ']';
  return '{' + Object.keys(v).sort().map(k => JSON.stringify(k) + ':' + canon(v[k])).join(',') + '}';
}
let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', d => { input += d; });
process.stdin.on('end', () => {
  const out = [];
  for (const line of input.split('\n')) {
    if (line === '') continue;
    if (mode === 'numbers') {
      view.setBigUint64(0, BigInt('0x' + line));
      out.push(String(view.getFloat64(0)));
    } else {
      out.push(canon(JSON.parse(line)));
    }
  }
  process.stdout.write(out.join('\n') + '\n');
});
`

// runNode runs nodeScript in mode over the lines, returning its lines.
func runNode(t *testing.T, mode string, lines []string) []string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("ONCEKV_JCS_NODE") == "required" {
			t.Fatalf("ONCEKV_JCS_NODE=required but node is not on PATH: %v", err)
		}
		t.Skipf("node is not on PATH (%v): the comparison with an ECMAScript engine is skipped; install nodejs to run it", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "-e", nodeScript, mode)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node: %s", stderr.String())
	got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	require.Len(t, got, len(lines), "node answered every line")
	return got
}

// TestNodeNumbers: for 300000 random doubles, the package writes what
// Node's Number.prototype.toString writes.
func TestNodeNumbers(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 262))
	n := 300000
	if testing.Short() {
		n = 30000
	}
	values := make([]float64, n)
	lines := make([]string, n)
	for i := range values {
		values[i] = randomNumber(rng)
		lines[i] = strconv.FormatUint(math.Float64bits(values[i]), 16)
	}
	want := runNode(t, "numbers", lines)
	for i, f := range values {
		if got := jcs.FormatNumber(f); got != want[i] {
			t.Fatalf("%016x: got %s, node writes %s (seed %d)", math.Float64bits(f), got, want[i], seed)
		}
	}
}

// TestNodeDocuments: random documents, spelled at random (member order,
// escapes, number spellings, spaces and tabs), canonicalise to what Node
// gets with JSON.parse, JSON.stringify and sort.
func TestNodeDocuments(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7493))
	sp := speller{rng: rng, space: " \t"} // no line breaks: one document a line
	n := 20000
	if testing.Short() {
		n = 2000
	}
	docs := make([]string, n)
	for i := range docs {
		docs[i] = sp.spell(randomValue(rng, 4))
	}
	want := runNode(t, "documents", docs)
	for i, doc := range docs {
		got, err := jcs.Canonicalize([]byte(doc))
		require.NoError(t, err, "%q (seed %d)", doc, seed)
		require.Equal(t, want[i], string(got), fmt.Sprintf("%q (seed %d)", doc, seed))
	}
}
