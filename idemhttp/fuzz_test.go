package idemhttp_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
)

// FuzzMiddleware sends an arbitrary Idempotency-Key header value and body
// through the middleware (in process, so bytes a real client would refuse
// get through too). Whatever they are: no panic; a malformed key is a 400
// problem and runs nothing; a well-formed one runs the handler once, the
// same request again is a byte-for-byte replay, and another body under the
// same key is a 422.
func FuzzMiddleware(f *testing.F) {
	f.Add("k1", []byte(`{"amount":12}`))
	f.Add(`"quoted key"`, []byte{})
	f.Add("", []byte("x"))
	f.Add(`"a\"b"`, []byte{0, 1, 2, 0xff})
	f.Add("\x00\r\n", []byte("body"))
	f.Add(string(bytes.Repeat([]byte("k"), 300)), bytes.Repeat([]byte{7}, 5000))

	db, err := oncekv.Open(f.TempDir()+"/fuzz.db", &oncekv.Options{NoSync: true, ExpireInterval: -1})
	require.NoError(f, err)
	f.Cleanup(func() { require.NoError(f, db.Close()) })
	var runs atomic.Int64
	mw, err := idemhttp.New(db, &idemhttp.Options{
		Scope:        func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil },
		MaxBodyBytes: 4096,
	})
	require.NoError(f, err)
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(r.Body)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(buf.Bytes()) // echoes the body: the replay must match it
	}))
	var scopes atomic.Int64

	f.Fuzz(func(t *testing.T, key string, body []byte) {
		scope := strconv.FormatInt(scopes.Add(1), 10) // a fresh caller: no record yet
		do := func(body []byte) *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodPost, "/pay", bytes.NewReader(body))
			req.Header["Idempotency-Key"] = []string{key}
			req.Header.Set("X-User", scope)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			return rec
		}
		before := runs.Load()
		first := do(body)
		switch first.Code {
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			require.Equal(t, "application/problem+json", first.Header().Get("Content-Type"))
			require.Equal(t, before, runs.Load(), "a refused request must not run the handler")
			return
		case http.StatusCreated:
		default:
			t.Fatalf("status %d: %s", first.Code, first.Body)
		}
		require.Equal(t, before+1, runs.Load())
		require.Equal(t, body, append([]byte{}, first.Body.Bytes()...))

		again := do(body)
		require.Equal(t, http.StatusCreated, again.Code)
		require.Equal(t, "true", again.Header().Get("Idempotent-Replayed"))
		require.Equal(t, first.Body.Bytes(), again.Body.Bytes())
		require.Equal(t, first.Header().Get("Content-Type"), again.Header().Get("Content-Type"))

		other := do(append(append([]byte{}, body...), 'x'))
		if len(body) < 4096 {
			require.Equal(t, http.StatusUnprocessableEntity, other.Code)
		}
		require.Equal(t, before+1, runs.Load())
	})
}
