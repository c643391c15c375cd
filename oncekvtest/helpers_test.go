package oncekvtest_test

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/oncekvtest"
)

// TestMain runs 30 rapid cases per check instead of 100, and 3 cases per
// CheckCrash whose Spec does not say, to keep the package's tests within
// CI's budget; ONCEKVTEST_SOAK=1 (or an explicit -rapid.checks,
// RAPID_CHECKS or ONCEKVTEST_CRASH_CHECKS) runs more.
func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv("ONCEKVTEST_SOAK") != "1" {
		explicit := false
		flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "rapid.checks" })
		if !explicit && os.Getenv("RAPID_CHECKS") == "" {
			if err := flag.Set("rapid.checks", "30"); err != nil {
				panic(err)
			}
		}
		if os.Getenv(oncekvtest.CrashChecksEnv) == "" {
			os.Setenv(oncekvtest.CrashChecksEnv, "3")
		}
	}
	os.Exit(m.Run())
}

// deposit is the message of the tests' handlers: an amount for an
// account, under an id minted once by its producer.
type deposit struct {
	ID      string `json:"id"`
	Account string `json:"account"`
	Amount  uint64 `json:"amount"`
}

// deposits draws deposits whose content follows from their id, so two
// draws of one id are the same message (a producer's duplicate), never
// two messages under one key.
var deposits = rapid.Custom(func(t *rapid.T) deposit {
	n := rapid.IntRange(0, 20).Draw(t, "deposit")
	return deposit{ID: fmt.Sprintf("dep-%d", n), Account: fmt.Sprintf("acct-%d", n%3), Amount: uint64(n + 1)}
})

var balances = []byte("balances")

// addToBalance is the correct effect: the increment commits with the
// message's mark, so the store applies it once per id.
func addToBalance(tx *oncekv.Tx, d deposit) ([]byte, error) {
	b, err := tx.CreateBucketIfNotExists(balances)
	if err != nil {
		return nil, err
	}
	var cur uint64
	if v := b.Get([]byte(d.Account)); v != nil {
		cur = binary.BigEndian.Uint64(v)
	}
	return []byte("ok"), b.Put([]byte(d.Account), binary.BigEndian.AppendUint64(nil, cur+d.Amount))
}

// requestOf is the correct request: the message's id is its key.
func requestOf(d deposit) oncekv.Request {
	body, err := json.Marshal(d)
	if err != nil {
		panic(err)
	}
	return oncekv.Request{Handler: "deposit", Key: d.ID, Payload: body}
}

// depositSpec is the correct handler's Spec.
func depositSpec() oncekvtest.Spec[deposit] {
	return oncekvtest.Spec[deposit]{Messages: deposits, Request: requestOf, Effect: addToBalance}
}

// newUUID is a random id, as a retry loop that mints its key would make.
func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}

// recorder is a testing.TB that records failures instead of failing the
// test, for the tests that expect a check to fail. FailNow ends the
// goroutine, as testing's does: run the check in a goroutine of its own.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	out    strings.Builder
	failed bool
}

func (r *recorder) Helper() {}

func (r *recorder) record(fail bool, s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.out.WriteString(s)
	r.out.WriteByte('\n')
	r.failed = r.failed || fail
}

func (r *recorder) Logf(format string, args ...any)   { r.record(false, fmt.Sprintf(format, args...)) }
func (r *recorder) Log(args ...any)                   { r.record(false, fmt.Sprint(args...)) }
func (r *recorder) Errorf(format string, args ...any) { r.record(true, fmt.Sprintf(format, args...)) }
func (r *recorder) Error(args ...any)                 { r.record(true, fmt.Sprint(args...)) }
func (r *recorder) Fail()                             { r.record(true, "") }
func (r *recorder) FailNow()                          { r.Fail(); runtime.Goexit() }
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...); runtime.Goexit() }
func (r *recorder) Fatal(args ...any)                 { r.Error(args...); runtime.Goexit() }
func (r *recorder) SkipNow()                          { r.record(true, "skipped"); runtime.Goexit() }
func (r *recorder) Skipf(format string, args ...any)  { r.Errorf(format, args...); r.SkipNow() }
func (r *recorder) Skip(args ...any)                  { r.Error(args...); r.SkipNow() }

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// plantedChecks is the fewest rapid cases expectFailure gives a check
// that must find a planted bug.
const plantedChecks = 300

// expectFailure runs check on a recorder and returns what it recorded,
// failing t if check did not fail. rapid writes no fail file meanwhile:
// these failures are the test passing.
func expectFailure(t *testing.T, check func(tb testing.TB)) string {
	t.Helper()
	was := flag.Lookup("rapid.nofailfile").Value.String()
	require.NoError(t, flag.Set("rapid.nofailfile", "true"))
	defer func() { require.NoError(t, flag.Set("rapid.nofailfile", was)) }()
	// A planted bug stops the check at its first failing case, so a larger
	// budget costs only when a case that shows it is slow to come (30 cases
	// once missed the reordering of two messages on one account).
	checks := flag.Lookup("rapid.checks").Value.String()
	if n, err := strconv.Atoi(checks); err == nil && n < plantedChecks {
		require.NoError(t, flag.Set("rapid.checks", strconv.Itoa(plantedChecks)))
		defer func() { require.NoError(t, flag.Set("rapid.checks", checks)) }()
	}
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(rec)
	}()
	<-done
	out := rec.out.String()
	require.True(t, rec.Failed(), "the check passed; it said:\n%s", out)
	return out
}
