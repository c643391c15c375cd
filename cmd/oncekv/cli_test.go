package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

func TestStatsGolden(t *testing.T) {
	path := fixture(t)
	r := cli(t, "stats", path, "-now", at(3*time.Hour))
	require.Equal(t, 0, r.code, r.stderr)
	golden(t, "stats.golden", r.stdout)
}

func TestMarkGolden(t *testing.T) {
	path := fixture(t)
	var out strings.Builder
	for _, key := range [][]string{{"pay", "order-1"}, {"pay", "order-2"}, {"email", "welcome-7"}, {"email", "receipt-9"}} {
		r := cli(t, "mark", path, key[0], key[1], "-now", at(time.Hour))
		require.Equal(t, 0, r.code, r.stderr)
		out.WriteString(r.stdout + "\n")
	}
	golden(t, "mark.golden", out.String())
}

func TestStatsJSON(t *testing.T) {
	path := fixture(t)
	r := cli(t, "stats", "-json", "-now", at(3*time.Hour), path)
	require.Equal(t, 0, r.code, r.stderr)
	var st struct {
		LiveMarks uint64            `json:"live_marks"`
		Age       float64           `json:"oldest_mark_age_seconds"`
		Claims    uint64            `json:"claims_in_progress"`
		States    map[string]uint64 `json:"marks_by_state"`
		Handlers  map[string]uint64 `json:"marks_by_handler"`
		Windows   []struct {
			Start time.Time `json:"start"`
			Marks uint64    `json:"marks"`
		} `json:"windows"`
		Buckets []struct {
			Name string `json:"name"`
			Keys int    `json:"keys"`
		} `json:"user_buckets"`
		File struct {
			Size int64 `json:"size_bytes"`
		} `json:"file"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.EqualValues(t, 4, st.LiveMarks)
	// The oldest mark was first seen at t0+5m: its age, not its window's
	// start (t0), which said 3h.
	require.Equal(t, (3*time.Hour - 5*time.Minute).Seconds(), st.Age)
	require.EqualValues(t, 1, st.Claims)
	require.Equal(t, map[string]uint64{"DONE": 2, "FAILED": 1, "IN_PROGRESS": 1}, st.States)
	require.Equal(t, map[string]uint64{"pay": 2, "email": 2}, st.Handlers)
	require.Len(t, st.Windows, 2)
	require.Equal(t, t0, st.Windows[0].Start)
	require.EqualValues(t, 2, st.Windows[0].Marks)
	require.Len(t, st.Buckets, 1)
	require.Equal(t, "balances", st.Buckets[0].Name)
	require.Equal(t, 2, st.Buckets[0].Keys)
	require.Positive(t, st.File.Size)
}

func TestMarkJSONAndNotFound(t *testing.T) {
	path := fixture(t)
	r := cli(t, "mark", "-json", path, "pay", "order-2")
	require.Equal(t, 0, r.code, r.stderr)
	var m struct {
		State     string    `json:"state"`
		FirstSeen time.Time `json:"first_seen"`
		Response  string    `json:"response"`
		Token     uint64    `json:"token"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &m))
	require.Equal(t, "DONE", m.State)
	require.Equal(t, t0.Add(70*time.Minute), m.FirstSeen)
	require.Equal(t, "\x00\x01\x02", m.Response)

	r = cli(t, "mark", path, "pay", "order-3")
	require.Equal(t, 1, r.code)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "no mark for the key")
}

func TestMarksFilters(t *testing.T) {
	path := fixture(t)
	cases := []struct {
		args []string
		want []string // handler/key, in order
	}{
		// Oldest window first; in a window by key, which begins with the
		// handler's length.
		{nil, []string{"pay/order-1", "email/welcome-7", "pay/order-2", "email/receipt-9"}},
		{[]string{"-handler", "pay"}, []string{"pay/order-1", "pay/order-2"}},
		{[]string{"-handler", "pa"}, nil}, // a prefix of a handler is another handler
		{[]string{"-state", "FAILED"}, []string{"email/welcome-7"}},
		{[]string{"-window", at(time.Hour)}, []string{"pay/order-2", "email/receipt-9"}},
		{[]string{"-limit", "1"}, []string{"pay/order-1"}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			r := cli(t, append([]string{"marks", path, "-json"}, c.args...)...)
			require.Equal(t, 0, r.code, r.stderr)
			var got []string
			for _, line := range lines(r.stdout) {
				if line == "" {
					continue
				}
				var m struct{ Handler, Key string }
				require.NoError(t, json.Unmarshal([]byte(line), &m), line)
				got = append(got, m.Handler+"/"+m.Key)
			}
			require.Equal(t, c.want, got)
		})
	}
	r := cli(t, "marks", path, "-state", "DONE")
	require.Equal(t, 0, r.code, r.stderr)
	require.Len(t, lines(r.stdout), 3) // header and two marks
	require.Contains(t, r.stdout, "STATE")
	r = cli(t, "marks", path, "-state", "done-ish")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "-state")
}

func TestCheck(t *testing.T) {
	path := fixture(t)
	r := cli(t, "check", path)
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	require.Equal(t, "ok\n", r.stdout)

	damageMark(t, path)
	r = cli(t, "check", path)
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stdout, `bucket "oncekv.window/2024-05-01T10:00:00Z" key "pay/order-1": checksum mismatch`)
	require.Contains(t, r.stdout, "1 problems found")

	r = cli(t, "check", "-json", path)
	require.Equal(t, 1, r.code)
	var p struct{ Bucket, Key, Error string }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &p))
	require.Equal(t, "oncekv.window/2024-05-01T10:00:00Z", p.Bucket)
	require.Equal(t, "pay/order-1", p.Key)

	// The mark itself reads as corrupt, naming it too: exit 2, an error.
	r = cli(t, "mark", path, "pay", "order-1")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "pay/order-1")

	notStore := filepath.Join(t.TempDir(), "other.db")
	require.NoError(t, os.WriteFile(notStore, []byte("not a bbolt file at all, not even close"), 0o600))
	r = cli(t, "check", notStore)
	require.Equal(t, 1, r.code, r.stdout+r.stderr)
}

// damageMark flips one byte of the mark of pay/order-1 in its window of the
// fixture at path: the bbolt file stays sound, the record's checksum does
// not.
func damageMark(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		var done bool
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			if done || !strings.HasPrefix(string(name), "oncekv.window/") {
				return nil
			}
			done = true
			mkey := append([]byte{0, 3}, "payorder-1"...)
			v := append([]byte(nil), b.Get(mkey)...)
			require.NotEmpty(t, v)
			v[len(v)/2] ^= 0x40
			return b.Put(mkey, v)
		})
	}))
	require.NoError(t, db.Close())
}

// TestUsagePrintedOnce: -h prints a command's usage once, on stdout, and
// exits 0; a flag it does not have prints the problem and the usage once,
// on stderr, and exits 2.
func TestUsagePrintedOnce(t *testing.T) {
	for _, name := range []string{"redrive", "dead-delete", "stats", "dump"} {
		help := cli(t, name, "-h")
		require.Equal(t, 0, help.code, name)
		require.Equal(t, 1, strings.Count(help.stdout, "usage: oncekv "+name+" "), "%s -h: %q", name, help.stdout)
		require.Empty(t, help.stderr, name)

		bad := cli(t, name, "-no-such-flag")
		require.Equal(t, 2, bad.code, name)
		require.Equal(t, 1, strings.Count(bad.stderr, "usage: oncekv "+name+" "), "%s -no-such-flag: %q", name, bad.stderr)
		require.Contains(t, bad.stderr, "flag provided but not defined: -no-such-flag", name)
		require.Empty(t, bad.stdout, name)
	}
}
