package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

func TestClaimsAndReleaseAfterSIGKILL(t *testing.T) {
	path := killedStore(t)

	r := cli(t, "claims", path, "-now", at(30*time.Minute))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "TOKEN")
	require.Regexp(t, `2024-05-01T11:00:00Z \(live, 30m0s left\)\s+"charge"\s+"stuck"`, r.stdout)
	require.Regexp(t, `2024-05-01T10:01:00Z \(ran out\)\s+"charge"\s+"short"`, r.stdout)

	r = cli(t, "claims", path, "-json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Len(t, lines(r.stdout), 2)
	var c struct {
		State      string    `json:"state"`
		LeaseUntil time.Time `json:"lease_until"`
		Token      uint64    `json:"token"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines(r.stdout)[0]), &c))
	require.Equal(t, "IN_PROGRESS", c.State)
	require.Positive(t, c.Token)

	// A lease that ran out is released without ado.
	r = cli(t, "release", path, "charge", "short", "-now", at(30*time.Minute))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "charge/short: released")

	// A live one is refused, and nothing changes...
	r = cli(t, "release", path, "charge", "stuck", "-now", at(30*time.Minute))
	require.Equal(t, 2, r.code, r.stdout)
	require.Contains(t, r.stderr, "live until 2024-05-01T11:00:00Z")
	require.Contains(t, r.stderr, "-force")
	r = cli(t, "mark", path, "charge", "stuck", "-now", at(30*time.Minute))
	require.Contains(t, r.stdout, "(live, 30m0s left)")

	// ...unless forced, which says what it risks.
	r = cli(t, "release", path, "charge", "stuck", "-force", "-now", at(30*time.Minute))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stderr, "warning: releasing a live claim")
	require.Contains(t, r.stderr, "deduplicates on claim key")
	r = cli(t, "mark", path, "charge", "stuck")
	require.Contains(t, r.stdout, "released")

	r = cli(t, "release", path, "charge", "never-claimed")
	require.Equal(t, 1, r.code)

	// The program takes the released key over at once, with a greater token.
	db, err := oncekv.Open(path, &oncekv.Options{Now: (&fakeClock{now: t0.Add(30 * time.Minute)}).Now, KeepOrphanedClaims: true})
	require.NoError(t, err)
	defer db.Close()
	cl, err := db.Claim(context.Background(), oncekv.Request{Handler: "charge", Key: "stuck"}, time.Minute)
	require.NoError(t, err)
	require.Greater(t, cl.Token(), c.Token)
}

func TestForget(t *testing.T) {
	path := fixture(t)
	r := cli(t, "forget", path, "pay", "order-1", "-now", at(time.Hour))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "pay/order-1: forgot its DONE mark")
	require.Equal(t, 1, cli(t, "mark", path, "pay", "order-1").code)
	require.Equal(t, 1, cli(t, "forget", path, "pay", "order-1").code)

	// A live claim stays.
	r = cli(t, "forget", path, "email", "receipt-9", "-now", at(time.Hour))
	require.Equal(t, 2, r.code, r.stdout)
	require.Contains(t, r.stderr, "being processed")
	require.Equal(t, 0, cli(t, "mark", path, "email", "receipt-9").code)
}

// TestExpireAndCompact fills a store, lets it expire and compacts it: the
// file shrinks, and the copy is a working store.
func TestExpireAndCompact(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "big.db")
	c := &fakeClock{now: t0}
	db := openStore(t, path, c)
	payload := strings.Repeat("x", 200)
	for i := range 4000 {
		if i == 3990 {
			c.now = t0.Add(2 * time.Hour) // the last few in a later window, which stays
		}
		_, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: fmt.Sprint("key-", i)},
			func(*oncekv.Tx) ([]byte, error) { return []byte(payload), nil })
		require.NoError(t, err)
	}
	require.NoError(t, db.Close())

	now := at(7*24*time.Hour + 90*time.Minute) // the first window has expired, the later one not
	r := cli(t, "expire", path, "-dry-run", "-now", now)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "would drop 1 windows, 3990 marks (dry run: nothing changed)")
	r = cli(t, "expire", path, "-dry-run", "-json", "-now", now)
	require.Equal(t, 0, r.code, r.stderr)
	require.Len(t, lines(r.stdout), 1) // one window a line
	var due struct{ Marks uint64 }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &due))
	require.EqualValues(t, 3990, due.Marks)
	require.Equal(t, 0, cli(t, "mark", path, "h", "key-1").code, "a dry run changed the store")

	r = cli(t, "expire", path, "-now", now)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "dropped 1 windows, 3990 marks")
	require.Equal(t, 1, cli(t, "mark", path, "h", "key-1", "-now", now).code)

	dst := filepath.Join(dir, "compact.db")
	r = cli(t, "compact", path, dst)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "compacted "+path)
	before, err := os.Stat(path)
	require.NoError(t, err)
	after, err := os.Stat(dst)
	require.NoError(t, err)
	require.Less(t, after.Size(), before.Size()/2, r.stdout)
	require.Equal(t, 0, cli(t, "mark", dst, "h", "key-3999", "-now", now).code)
	require.Equal(t, 0, cli(t, "check", dst).code)

	// An existing DST is never overwritten.
	r = cli(t, "compact", path, dst)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "exists")
	require.Equal(t, after.Size(), fileSize(t, dst))
}

func fileSize(t *testing.T, path string) int64 {
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Size()
}

func TestBackup(t *testing.T) {
	path := fixture(t)
	dst := filepath.Join(t.TempDir(), "copy.db")
	r := cli(t, "backup", path, dst)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "backed up")
	require.Equal(t, cli(t, "dump", path).stdout, cli(t, "dump", dst).stdout)
	r = cli(t, "backup", path, dst)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "exists")
}

func TestDumpLoadRoundTrip(t *testing.T) {
	path := fixture(t)
	dump := cli(t, "dump", path)
	require.Equal(t, 0, dump.code, dump.stderr)
	file := filepath.Join(t.TempDir(), "dump.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(dump.stdout), 0o600))

	moved := filepath.Join(t.TempDir(), "moved.db")
	r := cli(t, "load", moved, file, "-now", at(3*time.Hour))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "loaded 3 marks of 3 (0 expired skipped), 2 keys in 1 buckets")
	require.Contains(t, r.stderr, "1 claims in progress not loaded")

	// Everything but the claim in progress comes back, byte for byte.
	var want []string
	for _, line := range lines(dump.stdout) {
		if !strings.Contains(line, `"IN_PROGRESS"`) {
			want = append(want, line)
		}
	}
	require.Len(t, want, len(lines(dump.stdout))-1)
	require.Equal(t, want, lines(cli(t, "dump", moved).stdout))
	require.Contains(t, dump.stdout, `{"base64":"/wA="}`) // the key that is not UTF-8

	// The moved store deduplicates as the first one did.
	c := &fakeClock{now: t0.Add(3 * time.Hour)}
	db := openStore(t, moved, c)
	res, err := db.Apply(context.Background(), oncekv.Request{Handler: "pay", Key: "order-2", Payload: []byte("5 EUR")}, nil)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, []byte{0, 1, 2}, res.Response)
	_, err = db.Apply(context.Background(), oncekv.Request{Handler: "email", Key: "welcome-7", Payload: []byte("hi")}, nil)
	require.ErrorIs(t, err, oncekv.ErrFailed)
	require.NoError(t, db.Close())

	// A store with data is refused, and keeps what it had.
	r = cli(t, "load", moved, file)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "not empty")

	// Marks past the retention of the new store are skipped.
	late := filepath.Join(t.TempDir(), "late.db")
	r = cli(t, "load", late, file, "-now", at(7*24*time.Hour+90*time.Minute))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "loaded 1 marks of 3 (2 expired skipped)")

	// A dump of a build before format 3 has the whole SHA-256: the store
	// keeps its first 16 bytes, and deduplicates as before.
	full := regexp.MustCompile(`"fingerprint":"([0-9a-f]{32})"`).ReplaceAllString(dump.stdout,
		`"fingerprint":"${1}0123456789abcdef0123456789abcdef"`)
	require.NotEqual(t, dump.stdout, full)
	require.NoError(t, os.WriteFile(file, []byte(full), 0o600))
	older := filepath.Join(t.TempDir(), "older.db")
	r = cli(t, "load", older, file, "-now", at(3*time.Hour))
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, want, lines(cli(t, "dump", older).stdout))
	db = openStore(t, older, c)
	res, err = db.Apply(context.Background(), oncekv.Request{Handler: "pay", Key: "order-2", Payload: []byte("5 EUR")}, nil)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	_, err = db.Apply(context.Background(), oncekv.Request{Handler: "pay", Key: "order-2", Payload: []byte("6 EUR")}, nil)
	require.ErrorIs(t, err, oncekv.ErrKeyReuse)
	require.NoError(t, db.Close())

	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte(`{"type":"mark","handler":"h","key":"k","state":"DONE","fingerprint":"00ff"}`+"\n"), 0o600))
	r = cli(t, "load", filepath.Join(t.TempDir(), "x.db"), bad)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `fingerprint "00ff" is not 16 or 32 hex bytes`)
	require.NoError(t, os.WriteFile(bad, []byte(`{"type":"mark","handler":"h","key":"k","state":"MAYBE"}`+"\n"), 0o600))
	r = cli(t, "load", filepath.Join(t.TempDir(), "x.db"), bad)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `unknown state "MAYBE"`)
}

func TestUsageAndExitCodes(t *testing.T) {
	r := cli(t)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stdout, "commands:")
	r = cli(t, "help")
	require.Equal(t, 0, r.code)
	for _, name := range []string{"stats", "mark", "marks", "claims", "release", "forget", "expire", "check", "compact", "backup", "dump", "load",
		"queues", "messages", "dead", "redrive", "dead-delete", "http"} {
		require.Contains(t, r.stdout, "\n  "+name+" ")
		h := cli(t, name, "-h")
		require.Equal(t, 0, h.code, name)
		require.Contains(t, h.stdout, "usage: oncekv "+name+" [flags]", name)
	}
	path := fixture(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"mark", path, "pay"}, "want 3 arguments"},
		{[]string{"stats", path, "-bogus"}, "flag provided but not defined"},
		{[]string{"stats", filepath.Join(t.TempDir(), "missing.db")}, "no such file"},
		{[]string{"stats", path, "-now", "yesterday"}, `-now "yesterday"`},
		{[]string{"marks", path, "-limit", "-1"}, "must not be negative"},
	} {
		r := cli(t, c.args...)
		require.Equal(t, 2, r.code, c.args)
		require.Contains(t, r.stderr, c.want, c.args)
	}
	// "--" ends the flags, for a key that begins with "-".
	r = cli(t, "mark", path, "--", "pay", "-order")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, `"-order"`)
}

// TestShortWindows: a store of 1-minute windows and a 30-minute retention
// (more than MaxWindows of its windows in the default 168h) opens for the
// commands that do not go by the dedup window; expire needs the program's.
func TestShortWindows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "short.db")
	c := &fakeClock{now: t0}
	db, err := oncekv.Open(path, &oncekv.Options{Now: c.Now, NoSync: true, ExpireInterval: -1, WindowSpan: time.Minute, Retention: 30 * time.Minute})
	require.NoError(t, err)
	_, err = db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, nil)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	for _, args := range [][]string{{"stats", path}, {"mark", path, "h", "k"}, {"marks", path}, {"check", path}} {
		r := cli(t, args...)
		require.Equal(t, 0, r.code, "%v: %s", args, r.stderr)
	}
	r := cli(t, "expire", path, "-dry-run", "-now", at(time.Hour))
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "give the program's -retention")
	r = cli(t, "expire", path, "-dry-run", "-retention", "30m", "-now", at(time.Hour))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "would drop 1 windows, 1 marks")
}
