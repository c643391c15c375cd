package relay_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
	"github.com/oncekv/oncekv/relay"
)

// noteEdit is one edit a user made to a note, with the ID the app gave it.
type noteEdit struct{ ID, Note, Text string }

// outboxRecipe is docs/outbox-recipe.md's code, verbatim: its body is the
// doc's code block (TestOutboxRecipeDocIsTheExample), so the doc compiles,
// and Example_outboxRecipe runs it.
func outboxRecipe(ctx context.Context, path string, client *http.Client, serverURL string, edits []noteEdit, badge func(waiting, refused uint64)) error {
	db, err := oncekv.Open(path, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	outbox, err := queue.Open(db, "outbox", nil) // a dead edit holds its note's later edits back
	if err != nil {
		return err
	}
	defer outbox.Close()

	// Each edit: the note's row and its outbox entry commit together, once per edit ID.
	for _, e := range edits {
		req := oncekv.Request{Handler: "edit", Key: e.ID, Payload: []byte(e.Text)}
		_, err := db.Apply(ctx, req, func(tx *oncekv.Tx) ([]byte, error) {
			notes, err := tx.CreateBucketIfNotExists([]byte("notes"))
			if err != nil {
				return nil, err
			}
			if err := notes.Put([]byte(e.Note), []byte(e.Text)); err != nil {
				return nil, err
			}
			_, err = outbox.EnqueueTx(tx, queue.Message{Key: e.ID, Body: []byte(e.Text), OrderingKey: e.Note})
			return nil, err
		})
		if err != nil {
			return err
		}
	}

	// The sync: each edit POSTed with its ID as Idempotency-Key, one at a time per note.
	send, err := relay.HTTPSender(client, http.MethodPost, serverURL+"/edits", nil)
	if err != nil {
		return err
	}
	syncing, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- relay.Run(syncing, outbox, send, nil) }()
	defer func() { stop(); <-ran }()

	// The badge, without polling: the counts, read at each change.
	for {
		changed := outbox.Changed()
		st, err := outbox.Stats()
		if err != nil || st.Depth == 0 {
			return err // all synced (an app keeps its badge up until it quits)
		}
		badge(st.Depth, st.Dead) // "3 changes waiting to sync", "1 refused"
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Example_outboxRecipe runs docs/outbox-recipe.md: a note app's three
// edits, shown as waiting, then applied by the server once each, in order.
func Example_outboxRecipe() {
	dir, _ := os.MkdirTemp("", "recipe")
	defer os.RemoveAll(dir)
	var mu sync.Mutex
	var applied []string
	open := make(chan struct{}) // the server answers once the badge showed
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-open
		mu.Lock()
		defer mu.Unlock()
		applied = append(applied, r.Header.Get("Idempotency-Key"))
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	var once sync.Once
	badge := func(waiting, refused uint64) {
		once.Do(func() {
			fmt.Println("changes waiting to sync:", waiting, "refused:", refused)
			close(open)
		})
	}
	edits := []noteEdit{{"edit-1", "note-7", "buy"}, {"edit-2", "note-7", "buy milk"}, {"edit-3", "note-7", "buy milk and eggs"}}
	err := outboxRecipe(context.Background(), filepath.Join(dir, "notes.db"), srv.Client(), srv.URL, edits, badge)
	mu.Lock()
	defer mu.Unlock()
	fmt.Println("synced:", err == nil, "the server applied:", applied)
	// Output:
	// changes waiting to sync: 3 refused: 0
	// synced: true the server applied: [edit-1 edit-2 edit-3]
}

// TestOutboxRecipeDocIsTheExample: the recipe's code block is exactly
// outboxRecipe's body, one tab less, so it compiles and runs as written.
func TestOutboxRecipeDocIsTheExample(t *testing.T) {
	src, err := os.ReadFile("example_recipe_test.go")
	require.NoError(t, err)
	_, body, ok := strings.Cut(string(src), "badge func(waiting, refused uint64)) error {\n")
	require.True(t, ok)
	body, _, ok = strings.Cut(body, "\n}\n")
	require.True(t, ok)
	var want strings.Builder
	for _, line := range strings.Split(body, "\n") {
		want.WriteString(strings.TrimPrefix(line, "\t") + "\n")
	}
	doc, err := os.ReadFile(filepath.Join("..", "docs", "outbox-recipe.md"))
	require.NoError(t, err)
	_, block, ok := strings.Cut(string(doc), "```go\n")
	require.True(t, ok)
	block, _, ok = strings.Cut(block, "```\n")
	require.True(t, ok)
	require.Equal(t, want.String(), block, "the recipe's block must be outboxRecipe's body, one tab less")
}
