package main_test

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/admin"
)

// liveApp is a program that holds its store open, with the admin handler
// mounted behind basic authentication.
func liveApp(t *testing.T) (path, url string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "live.db")
	db := openStore(t, path, &fakeClock{now: t0})
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	fillQueueStore(t, db)
	h, err := admin.New(db, nil)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/debug/oncekv/", http.StripPrefix("/debug/oncekv", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pass, ok := r.BasicAuth(); !ok || pass != "s3cret" {
			http.Error(w, "operators only", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return path, srv.URL + "/debug/oncekv"
}

var basicAuth = "Basic " + base64.StdEncoding.EncodeToString([]byte("ops:s3cret"))

// TestLockedFileNamesTheTwoWaysOut: a store a running process holds is
// refused after the open timeout, saying so and naming the admin handler
// and a backup, for read and write commands alike.
func TestLockedFileNamesTheTwoWaysOut(t *testing.T) {
	path, _ := liveApp(t)
	for _, args := range [][]string{{"stats", path}, {"redrive", path, "outbox", "1"}} {
		r := cli(t, args...)
		require.Equal(t, 2, r.code, r.stdout)
		require.Contains(t, r.stderr, "held open by a running process")
		require.Contains(t, r.stderr, "admin handler")
		require.Contains(t, r.stderr, "backup")
		require.Contains(t, r.stderr, path)
	}
}

// TestReadCommandsTakeAnAdminURL: every read command reads a running
// program's store through its admin handler, authenticated by -header or
// the environment; a write command refuses a URL.
func TestReadCommandsTakeAnAdminURL(t *testing.T) {
	_, url := liveApp(t)
	now := at(time.Minute)
	r := cli(t, "queues", url, "-now", now)
	require.Equal(t, 2, r.code, r.stdout)
	require.Contains(t, r.stderr, "401 Unauthorized: operators only")
	require.Contains(t, r.stderr, "-header")

	auth := []string{"-header", "Authorization: " + basicAuth}
	r = cli(t, append([]string{"queues", url, "-now", now}, auth...)...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `outbox\s+4\s+0\s+1\s+1\s+2\s+1\s`, r.stdout)

	env := []string{"ONCEKV_ADMIN_AUTHORIZATION=" + basicAuth}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"stats", url}, "queues (1)"},
		{[]string{"dead", url, "outbox"}, `"http status 422: Note locked"`},
		{[]string{"messages", url, "outbox", "-now", now}, "waiting"},
		{[]string{"http", url, "alice", "order-7"}, "/orders/7"},
		{[]string{"marks", url, "-handler", "idemhttp"}, "DONE"},
		{[]string{"mark", url, "oncekv.queue.outbox", "edit-1"}, "DONE"},
		{[]string{"dump", url}, `"decoded"`},
		{[]string{"check", url}, "ok"},
	} {
		r := cliEnv(t, env, c.args...)
		require.Equal(t, 0, r.code, "%v: %s", c.args, r.stderr)
		require.Contains(t, r.stdout, c.want, c.args)
	}
	copyPath := filepath.Join(t.TempDir(), "copy.db")
	r = cliEnv(t, env, "backup", url, copyPath)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `outbox\s+4\s+0\s+1\s+1\s+2\s+1\s`, cli(t, "queues", copyPath, "-now", now).stdout)
	r = cliEnv(t, env, "redrive", url, "outbox", "1")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "this one writes")
	r = cliEnv(t, env, "stats", url+"/nowhere")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "404")
}
