package oncekvtest_test

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/oncekvtest"
)

// The snippets of docs/testing-your-handlers.md, verbatim
// (TestTheDocsSnippetsAreTheseTests keeps them equal), so that they compile
// and run.

// credit is a message: an amount for an account, under an id its
// producer minted once.
type credit struct {
	ID      string
	Account string
	Cents   int64
}

var credits = oncekvtest.Spec[credit]{
	// S is drawn from these. The content follows from the id: two draws of
	// one id are one message delivered twice, never two under one key.
	Messages: rapid.Custom(func(t *rapid.T) credit {
		n := rapid.IntRange(0, 50).Draw(t, "credit")
		return credit{ID: fmt.Sprint("c-", n), Account: fmt.Sprint("acct-", n%3), Cents: int64(n + 1)}
	}),
	// How a message becomes a request: its key comes from the message.
	Request: func(c credit) oncekv.Request {
		return oncekv.Request{Handler: "credit", Key: c.ID, Payload: fmt.Append(nil, c.Account, c.Cents)}
	},
	// The handler's effect, as Apply runs it.
	Effect: func(tx *oncekv.Tx, c credit) ([]byte, error) {
		b, err := tx.CreateBucketIfNotExists([]byte("balances"))
		if err != nil {
			return nil, err
		}
		balance, _ := strconv.ParseInt(string(b.Get([]byte(c.Account))), 10, 64)
		return nil, b.Put([]byte(c.Account), strconv.AppendInt(nil, balance+c.Cents, 10))
	},
}

func TestCreditsApplyOnce(t *testing.T) {
	oncekvtest.Check(t, credits)
}

func TestCreditsSurviveSIGKILL(t *testing.T) {
	oncekvtest.CheckCrash(t, credits)
}

// The docs' Go blocks are this file's code, verbatim.
func TestTheDocsSnippetsAreTheseTests(t *testing.T) {
	doc, err := os.ReadFile("../docs/testing-your-handlers.md")
	require.NoError(t, err)
	src, err := os.ReadFile("example_docs_test.go")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```\n").FindAllSubmatch(doc, -1)
	require.Len(t, blocks, 2)
	for _, b := range blocks {
		require.True(t, strings.Contains(string(src), string(b[1])), "a Go block of the doc is not in example_docs_test.go:\n%s", b[1])
	}
}
