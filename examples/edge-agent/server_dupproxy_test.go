package edgeagent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/dupproxy"
	edgeagent "github.com/oncekv/oncekv/examples/edge-agent"
)

// The ingest server behind dupproxy, every reading sent twice,
// concurrently with the original, over 127.0.0.1: a copy with the
// reading's key meets the original running (409, asked again) or gets the
// stored answer, or takes the key first (the client then gets the 409),
// and each reading is applied once; a copy without the key is refused
// (400): the route needs it.
func TestIngestUnderDuplicateInjection(t *testing.T) {
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "server.db"), &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	s, err := edgeagent.NewServer(db)
	require.NoError(t, err)
	up := httptest.NewServer(s)
	t.Cleanup(up.Close)
	u, err := url.Parse(up.URL)
	require.NoError(t, err)
	p, err := dupproxy.New(&dupproxy.Options{Upstream: u, Fraction: 1, Mode: dupproxy.Concurrent, Keys: dupproxy.BothKeys})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)

	for i := range 4 {
		rd := edgeagent.Reading{ID: fmt.Sprint("r", i), Sensor: "t1", Value: float64(i)}
		body, err := json.Marshal(rd)
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, front.URL+"/ingest", strings.NewReader(string(body)))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Device edge-1")
		req.Header.Set("Idempotency-Key", rd.ID)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		// The original's 201, or a 409 when the upstream took its copy first.
		require.Contains(t, []int{http.StatusCreated, http.StatusConflict}, resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, p.Wait(ctx))
	r := p.Report()
	var with, without dupproxy.RouteReport
	for _, row := range r.Routes {
		switch row.Key {
		case dupproxy.WithKey:
			with = row
		case dupproxy.WithoutKey:
			without = row
		}
	}
	require.Equal(t, "POST /ingest", with.Route)
	require.Equal(t, uint64(4), with.Copies)
	require.Zero(t, with.Differed, "%+v", with.Examples)
	// An original that lost its race to its copy got 409: its copies are
	// conflicts, not compared; every other copy without the key got 400.
	require.Equal(t, uint64(4), without.Differed+without.Conflicts)
	require.Equal(t, without.Conflicts, with.Conflicts)
	for _, e := range without.Examples {
		require.Equal(t, "status 201 vs 400", e.Difference)
	}
	applied, err := s.Applied()
	require.NoError(t, err)
	require.Len(t, applied, 4)
	for id, n := range applied {
		require.Equal(t, uint64(1), n, id)
	}
}
