package oncekv_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// delivery is a message as a broker hands it over.
type delivery struct {
	EventID, OrderID string
	Value            []byte
}

// paymentGateway is an external system that deduplicates on an
// idempotency key and fences on a token.
type paymentGateway interface {
	Charge(ctx context.Context, order, idempotencyKey string, token uint64) (receipt []byte, err error)
}

type fakeGateway struct{}

func (fakeGateway) Charge(_ context.Context, order, key string, token uint64) ([]byte, error) {
	return fmt.Appendf(nil, "receipt for %s (key %s, token %d)", order, key, token), nil
}

// apiInOneScreen is the README's "API in one screen", verbatim: its body is
// the README's code block (TestREADMEAPIIsTheExample), so the README
// compiles, and Example_apiInOneScreen runs it.
func apiInOneScreen(ctx context.Context, msg delivery, reqs []oncekv.Request, gateway paymentGateway) error {
	db, err := oncekv.Open("app.db", nil) // nil: defaults; see Options
	if err != nil {
		return err
	}
	defer db.Close()

	// For every delivery of a message, however many there are:
	res, err := db.Apply(ctx, oncekv.Request{
		Handler: "payment_captured", // dedup scope is (Handler, Key)
		Key:     msg.EventID,        // idempotency key: minted once by the producer, reused by every retry
		Payload: msg.Value,          // a 16-byte fingerprint of it is kept: same key + other payload = ErrKeyReuse
		// Fingerprint: hash of the content, // optional: compared instead of the payload's bytes
	}, func(tx *oncekv.Tx) ([]byte, error) {
		b, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			return nil, err
		}
		// Any read-modify-write on user buckets: it commits with the mark.
		if err := b.Put([]byte(msg.OrderID), []byte("paid")); err != nil {
			return nil, err
		}
		return []byte(`{"status":"paid"}`), nil // stored; every duplicate gets it back
	})
	switch advice := oncekv.Classify(err); advice.Action {
	case oncekv.Ack: // applied, or a duplicate (res.Duplicate): ack
		fmt.Printf("ack: %s duplicate=%v\n", res.Response, res.Duplicate)
	case oncekv.RetryNow: // nothing applied (ctx ended, CAS lost): redeliver now
	case oncekv.RetryLater: // in progress elsewhere (until advice.NotBefore), disk full, transient effect error: nak with backoff
	case oncekv.GiveUp: // key too large, key reused, recorded failure, fenced: dead-letter, never loop
	case oncekv.Reopen: // closed, read-only, or poisoned by an I/O error: reopen the DB
	}

	// A consumer's poll of 500 messages: one transaction, one fsync, per-message results.
	results, err := db.ApplyBatch(ctx, reqs, func(tx *oncekv.Tx, i int) ([]byte, error) {
		return nil, nil // the effect of reqs[i]
	})
	if err != nil {
		return err
	}
	fmt.Println("batch:", len(results), "results")

	// An effect outside the store (e-mail, payment gateway): claim, act, record.
	charge := oncekv.Request{Handler: "charge", Key: msg.OrderID, Payload: msg.Value}
	c, err := db.Claim(ctx, charge, 30*time.Second) // ErrInProgress if a live claim holds it
	if err != nil {
		return err
	}
	if !c.Done() { // c.Done(): a duplicate, and c.Result() is the stored result
		// Two values for the gateway: Key() to deduplicate (stable across retries and
		// takeovers), Token() to fence a zombie (new at every takeover). Never the token as the key.
		receipt, err := gateway.Charge(ctx, msg.OrderID, c.Key(), c.Token())
		if err != nil {
			return c.Fail(ctx, err) // released for a retry (Permanent(err): recorded FAILED)
		}
		res, err := c.Complete(ctx, receipt, nil) // ErrFenced if the lease ran out and another worker took over
		if err != nil {
			return err
		}
		fmt.Printf("charged: %s\n", res.Response)
	}

	// Order: dedup does not fix reordering; fences do.
	fence, err := db.NextFence("account/42") // strictly increasing, persisted, never reused
	if err != nil {
		return err
	}
	err = db.Update(func(tx *oncekv.Tx) error { // plain transactions on user buckets, bbolt style
		b, err := tx.CreateBucketIfNotExists([]byte("accounts"))
		if err != nil {
			return err
		}
		return b.PutFenced([]byte("42"), []byte("balance=10"), fence) // ErrFenced unless fence > the stored one
	}) // PutIfVersion and Version: compare-and-set
	if err != nil {
		return err
	}
	err = db.View(func(tx *oncekv.Tx) error {
		b := tx.Bucket([]byte("accounts"))
		fmt.Printf("account 42: %s, fence %d\n", b.Get([]byte("42")), b.Fence([]byte("42")))
		return nil
	})
	if err != nil {
		return err
	}

	stats := db.Stats() // per handler: Applied, DuplicatesSuppressed, KeyReuses, ...; windows, Bloom, expiry
	fmt.Println("applied:", stats.Total.Applied)
	if _, err := db.Expire(ctx); err != nil { // drop windows past the retention now (also runs in the background)
		return err
	}

	// Support and operations.
	info, err := db.Mark("payment_captured", msg.EventID) // state, first seen, response, lease, token; ErrNotFound
	if err != nil {
		return err
	}
	fmt.Println("mark:", info.State)
	err = db.Claims(func(m oncekv.MarkInfo) error { // every claim in progress;
		return db.ReleaseClaim(m.Handler, m.Key, m.Token) // let a stuck claim be taken over now
	})
	if err != nil {
		return err
	}
	if _, err := db.BackupFile("backup.db"); err != nil { // consistent copy of the live store (Backup(w) for any io.Writer)
		return err
	}
	if err := db.Sync(); err != nil { // flush, for Options.NoSync users
		return err
	}
	_ = db.Now() // the store's clock (Options.Now, never going back): use it for leases and delays
	// Open with &oncekv.Options{ReadOnly: true}: shared lock, writes refused, Close writes nothing.
	return db.Forget("payment_captured", msg.EventID) // drop one mark: the next delivery applies again
}

// depositMsg is the message of the package documentation's example.
type depositMsg struct {
	ID, Account string
	Amount      int
	Body        []byte
}

// packageDocExample is the example of doc.go, verbatim
// (TestPackageDocIsTheExample).
func packageDocExample(ctx context.Context, msg depositMsg) error {
	db, err := oncekv.Open("app.db", nil)
	if err != nil {
		return err
	}
	defer db.Close()
	res, err := db.Apply(ctx, oncekv.Request{Handler: "deposit", Key: msg.ID, Payload: msg.Body},
		func(tx *oncekv.Tx) ([]byte, error) {
			b, err := tx.CreateBucketIfNotExists([]byte("balances"))
			if err != nil {
				return nil, err
			}
			// Read, add, write back: not idempotent, and it need not be.
			balance, _ := strconv.Atoi(string(b.Get([]byte(msg.Account))))
			balance += msg.Amount
			return []byte("ok"), b.Put([]byte(msg.Account), strconv.AppendInt(nil, int64(balance), 10))
		})
	if err != nil {
		return err
	}
	if res.Duplicate {
		fmt.Println("a duplicate: the effect did not run again")
	}
	return nil
}

// inTempDir runs fn in a new temporary directory, for the examples that
// open "app.db" as the README and the package documentation do.
func inTempDir(fn func()) {
	dir, err := os.MkdirTemp("", "oncekv-readme")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	wd, err := os.Getwd()
	if err != nil {
		log.Fatal(err)
	}
	if err := os.Chdir(dir); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = os.Chdir(wd) }()
	fn()
}

// Example runs the package documentation's example for two deliveries of
// one message.
func Example() {
	inTempDir(func() {
		msg := depositMsg{ID: "msg-1", Account: "alice", Amount: 5, Body: []byte(`{"amount":5}`)}
		for range 2 {
			if err := packageDocExample(context.Background(), msg); err != nil {
				log.Fatal(err)
			}
		}
	})
	// Output: a duplicate: the effect did not run again
}

// Example_apiInOneScreen runs the README's "API in one screen" against a
// fake gateway, in a temporary directory.
func Example_apiInOneScreen() {
	inTempDir(func() {
		msg := delivery{EventID: "evt-1", OrderID: "order-7", Value: []byte(`{"amount":10}`)}
		reqs := []oncekv.Request{{Handler: "poll", Key: "m1"}, {Handler: "poll", Key: "m2"}}
		if err := apiInOneScreen(context.Background(), msg, reqs, fakeGateway{}); err != nil {
			log.Fatal(err)
		}
	})
	// Output:
	// ack: {"status":"paid"} duplicate=false
	// batch: 2 results
	// charged: receipt for order-7 (key 92a7e1beb7091cafb069d6fea555dbeb09b82cc2aaad7f3280732ee9a3287aec, token 1)
	// account 42: balance=10, fence 1
	// applied: 4
	// mark: DONE
}

// functionBody returns the body of the function of this file whose
// signature ends with signatureEnd, each line with its first tab dropped.
func functionBody(t *testing.T, signatureEnd string) string {
	t.Helper()
	src, err := os.ReadFile("example_readme_test.go")
	require.NoError(t, err)
	_, body, ok := strings.Cut(string(src), signatureEnd+" {\n")
	require.True(t, ok, signatureEnd)
	body, _, ok = strings.Cut(body, "\n}\n")
	require.True(t, ok)
	var b strings.Builder
	for _, line := range strings.Split(body, "\n") {
		b.WriteString(strings.TrimPrefix(line, "\t") + "\n")
	}
	return b.String()
}

// TestPackageDocIsTheExample: the code block of doc.go is exactly the body
// of packageDocExample, so it compiles and runs as written.
func TestPackageDocIsTheExample(t *testing.T) {
	want := functionBody(t, "msg depositMsg) error")
	src, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	var block strings.Builder
	for _, line := range strings.Split(string(src), "\n") {
		if code, ok := strings.CutPrefix(line, "//\t"); ok {
			block.WriteString(code + "\n")
		} else if block.Len() > 0 {
			break // the first code block only
		}
	}
	require.Equal(t, want, block.String(), "doc.go's first code block must be packageDocExample's body, one tab less")
}

// TestREADMEAPIIsTheExample: the README's "API in one screen" block is
// exactly the body of apiInOneScreen, so it compiles and runs as written.
func TestREADMEAPIIsTheExample(t *testing.T) {
	want := functionBody(t, "gateway paymentGateway) error")
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(readme), "## The API in one screen\n")
	require.True(t, ok)
	_, block, ok := strings.Cut(section, "```go\n")
	require.True(t, ok)
	block, _, ok = strings.Cut(block, "```\n")
	require.True(t, ok)
	require.Equal(t, want, block, "the README's block must be apiInOneScreen's body, one tab less")
}

// The markers that say how a code block of README.md or docs/*.md is
// checked; TestDocsCodeBlocks requires one right above every block.
var (
	// The block is the body of function FUNC in FILE (a path from the
	// repository's root), one tab less, and FILE calls FUNC: an Example
	// runs it.
	bodyMarker = regexp.MustCompile(`^<!-- checked: the body of (\w+) in (\S+) -->$`)
	// The block is the whole function FUNC (its declaration, without its
	// doc comment) in FILE: an Example or a test, so it compiles and runs.
	funcMarker = regexp.MustCompile(`^<!-- checked: the function (\w+) in (\S+) -->$`)
	// A test TEST in package directory DIR reads this document and runs
	// the block.
	testMarker = regexp.MustCompile(`^<!-- checked: run by (\w+) in (\S+) -->$`)
	// Each command of the block (comments and VAR=value prefixes dropped)
	// is in .ci/run, and each VAR is read by the repository's code.
	ciMarker = "<!-- checked: the commands are in .ci/run -->"
	// Every path in the block's first column exists (globs match).
	pathsMarker = "<!-- checked: every path in the first column exists -->"
)

// docFiles are the documents whose code blocks and names are checked.
func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join("docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, docs, "docs/*.md")
	return append([]string{"README.md"}, docs...)
}

// listItem is the first line of a Markdown list item.
var listItem = regexp.MustCompile(`^\s*([-*+]|\d+\.) `)

// docBlock is one fenced code block of a document and the marker above it.
type docBlock struct {
	doc, marker, body string
	line              int
}

// docBlocks returns the fenced code blocks of doc, each with the line just
// above its opening fence.
func docBlocks(t *testing.T, doc string) []docBlock {
	t.Helper()
	src, err := os.ReadFile(doc)
	require.NoError(t, err)
	var blocks []docBlock
	lines := strings.Split(string(src), "\n")
	inList := false // in a list item, whose indented lines continue it
	for i := 0; i < len(lines); i++ {
		if strings.HasPrefix(strings.TrimLeft(lines[i], " \t"), "```") && !strings.HasPrefix(lines[i], "```") {
			t.Fatalf("%s:%d: an indented code block; put it at the start of the line so it is checked", doc, i+1)
		}
		indented := strings.HasPrefix(lines[i], "    ") || strings.HasPrefix(lines[i], "\t")
		switch {
		case listItem.MatchString(lines[i]):
			inList = true
		case indented && !inList && i > 0 && strings.TrimSpace(lines[i-1]) == "":
			t.Fatalf("%s:%d: a code block made by indenting, which no marker can check; fence it with ``` and mark it", doc, i+1)
		case !indented && strings.TrimSpace(lines[i]) != "":
			inList = false
		}
		if !strings.HasPrefix(lines[i], "```") {
			continue
		}
		b := docBlock{doc: doc, line: i + 1}
		if i > 0 {
			b.marker = lines[i-1]
		}
		var body strings.Builder
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			body.WriteString(lines[i] + "\n")
		}
		require.Less(t, i, len(lines), "%s:%d: the code block does not end", doc, b.line)
		b.body = body.String()
		blocks = append(blocks, b)
	}
	return blocks
}

// goFuncBody returns the body of the function name in the Go file path,
// each line with its first tab dropped, and the file's text.
func goFuncBody(t *testing.T, path, name string) (body, file string) {
	t.Helper()
	src, err := os.ReadFile(path)
	require.NoError(t, err)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	require.NoError(t, err)
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || fn.Name.Name != name {
			continue
		}
		inner := string(src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset])
		inner = strings.TrimPrefix(inner, "\n")
		var b strings.Builder
		for _, line := range strings.SplitAfter(inner, "\n") {
			b.WriteString(strings.TrimPrefix(line, "\t"))
		}
		return b.String(), string(src)
	}
	t.Fatalf("%s has no function %s", path, name)
	return "", ""
}

// goFuncDecl returns the declaration of the function name in the Go file
// path, from "func" to its closing brace and a newline.
func goFuncDecl(t *testing.T, path, name string) string {
	t.Helper()
	src, err := os.ReadFile(path)
	require.NoError(t, err)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	require.NoError(t, err)
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == name {
			return string(src[fset.Position(fn.Pos()).Offset:fset.Position(fn.End()).Offset]) + "\n"
		}
	}
	t.Fatalf("%s has no function %s", path, name)
	return ""
}

// TestDocsCodeBlocks: every fenced code block of README.md and docs/*.md
// has a marker above it saying how it is checked, and that check holds, so
// that no snippet of a guide can stop compiling or running unseen.
func TestDocsCodeBlocks(t *testing.T) {
	ciRun, err := os.ReadFile(filepath.Join(".ci", "run"))
	require.NoError(t, err)
	checked := 0
	for _, doc := range docFiles(t) {
		for _, b := range docBlocks(t, doc) {
			where := fmt.Sprintf("%s:%d", b.doc, b.line)
			m, tm, fm := bodyMarker.FindStringSubmatch(b.marker), testMarker.FindStringSubmatch(b.marker), funcMarker.FindStringSubmatch(b.marker)
			switch {
			case m != nil:
				body, file := goFuncBody(t, filepath.FromSlash(m[2]), m[1])
				require.Equal(t, body, b.body, "%s: the block must be the body of %s in %s, one tab less", where, m[1], m[2])
				require.GreaterOrEqual(t, strings.Count(file, m[1]+"("), 2, "%s: nothing in %s calls %s", where, m[2], m[1])
			case fm != nil:
				decl := goFuncDecl(t, filepath.FromSlash(fm[2]), fm[1])
				require.Equal(t, decl, b.body, "%s: the block must be the function %s in %s", where, fm[1], fm[2])
			case tm != nil:
				requireTestReads(t, where, tm[2], tm[1], b.doc)
			case b.marker == ciMarker:
				requireCommandsInCI(t, where, b.body, string(ciRun))
			case b.marker == pathsMarker:
				requirePathsExist(t, where, b.body)
			default:
				t.Errorf("%s: a code block without a marker saying how it is checked (the line above it is %q)", where, b.marker)
				continue
			}
			checked++
		}
	}
	require.GreaterOrEqual(t, checked, 10, "the docs lost their code blocks")
}

// requireTestReads requires a test file of the package in dir to define
// test and to name doc, the document it checks.
func requireTestReads(t *testing.T, where, dir, test, doc string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(filepath.FromSlash(dir), "*_test.go"))
	require.NoError(t, err)
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		if strings.Contains(string(src), "\nfunc "+test+"(t *testing.T) {") {
			require.Contains(t, string(src), filepath.ToSlash(doc), "%s: %s in %s does not read %s", where, test, f, doc)
			return
		}
	}
	t.Errorf("%s: no test %s in %s", where, test, dir)
}

// requireCommandsInCI requires each command of a shell block to be run by
// .ci/run, and each variable the block sets to be read by the code.
func requireCommandsInCI(t *testing.T, where, block, ciRun string) {
	t.Helper()
	for _, line := range strings.Split(block, "\n") {
		line, _, _ = strings.Cut(line, "#")
		words := strings.Fields(line)
		for len(words) > 0 && regexp.MustCompile(`^[A-Z][A-Z0-9_]*=`).MatchString(words[0]) {
			name, _, _ := strings.Cut(words[0], "=")
			require.True(t, codeMentions(t, name), "%s: nothing in the code reads %s", where, name)
			words = words[1:]
		}
		if len(words) == 0 {
			continue
		}
		cmd := strings.Join(words, " ")
		require.Contains(t, ciRun, cmd, "%s: .ci/run does not run %q", where, cmd)
	}
}

// codeMentions reports whether a Go or shell file of the repository names
// word.
func codeMentions(t *testing.T, word string) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || found {
			return err
		}
		if d.IsDir() {
			if path != "." && strings.HasPrefix(d.Name(), ".") && d.Name() != ".ci" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if ext := filepath.Ext(path); ext != ".go" && ext != ".sh" && path != filepath.Join(".ci", "run") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		found = strings.Contains(string(src), word)
		return nil
	})
	require.NoError(t, err)
	return found
}

// requirePathsExist requires the paths of a layout block's first column
// (before the first run of two spaces, comma-separated) to exist.
func requirePathsExist(t *testing.T, where, block string) {
	t.Helper()
	for _, line := range strings.Split(block, "\n") {
		if line == "" || line[0] == ' ' || line[0] == '\t' {
			continue // a continuation of the line above
		}
		column, _, _ := strings.Cut(line, "  ")
		for _, p := range strings.Split(column, ",") {
			p = strings.TrimSpace(p)
			matches, err := filepath.Glob(filepath.FromSlash(strings.TrimSuffix(p, "/")))
			require.NoError(t, err)
			require.NotEmpty(t, matches, "%s: %s does not exist", where, p)
		}
	}
}

// TestDocsNamesExist: every test, benchmark, example and fuzz target that
// README.md or docs/*.md names in backquotes is defined in the repository,
// and every relative link leads to a file, so a rename cannot leave a
// guide pointing at nothing.
func TestDocsNamesExist(t *testing.T) {
	defined := map[string]bool{}
	subtests := map[string]bool{} // the quoted names of t.Run's and the suites' cases
	funcs := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Example|Fuzz)\w*)\(`)
	quoted := regexp.MustCompile(`"([A-Z]\w*)"`)
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range quoted.FindAllStringSubmatch(string(src), -1) {
			subtests[m[1]] = true
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		for _, m := range funcs.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	require.NoError(t, err)
	require.True(t, defined["TestDocsNamesExist"], "the walk found no tests")

	named := regexp.MustCompile("`((?:Test|Benchmark|Example|Fuzz)[A-Z_]\\w*)(?:/(\\w+))?`")
	links := regexp.MustCompile(`\]\(([^)\s#]+)(?:#[^)\s]*)?\)`)
	for _, doc := range docFiles(t) {
		src, err := os.ReadFile(doc)
		require.NoError(t, err)
		for _, m := range named.FindAllStringSubmatch(string(src), -1) {
			require.True(t, defined[m[1]], "%s names %s, which no _test.go file defines", doc, m[1])
			if m[2] != "" {
				require.True(t, subtests[m[2]], "%s names %s/%s, and no Go file names the case %q", doc, m[1], m[2], m[2])
			}
		}
		for _, m := range links.FindAllStringSubmatch(string(src), -1) {
			if strings.Contains(m[1], "://") || strings.HasPrefix(m[1], "mailto:") {
				continue
			}
			_, err := os.Stat(filepath.Join(filepath.Dir(doc), filepath.FromSlash(m[1])))
			require.NoError(t, err, "%s links to %s", doc, m[1])
		}
	}
}
