package checkout_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/dupproxy"
	"github.com/oncekv/oncekv/examples/checkout"
)

// The shop behind dupproxy, every payment sent twice, over 127.0.0.1: a
// copy with the page's key gets the first receipt back and charges
// nothing; a copy without one is refused (400), which shows /pay needs
// its key. The gateway charged once per payment.
func TestPayUnderDuplicateInjection(t *testing.T) {
	shop, p, front, client := shopBehindProxy(t, dupproxy.Options{Fraction: 1, Keys: dupproxy.BothKeys,
		CompareHeaders: []string{"Location", "Content-Type"}})
	for i := range 3 {
		req, err := http.NewRequest(http.MethodPost, front.URL+"/pay", strings.NewReader(`{"amount_cents":1200}`))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", fmt.Sprint("page-key-", i))
		resp, err := client.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, p.Wait(ctx))
	r := p.Report()
	var text strings.Builder
	require.NoError(t, r.WriteText(&text))
	t.Logf("the proxy's report:\n%s", text.String())
	rows := map[string]dupproxy.RouteReport{}
	for _, row := range r.Routes {
		rows[row.Route+" "+row.Key] = row
	}
	with, without := rows["POST /pay "+dupproxy.WithKey], rows["POST /pay "+dupproxy.WithoutKey]
	require.Equal(t, uint64(3), with.Copies)
	require.Zero(t, with.Differed, "%+v", with.Examples)
	require.Equal(t, uint64(3), without.Differed)
	require.Equal(t, "status 201 vs 400", without.Examples[0].Difference)
	require.Equal(t, int64(3), shop.GatewayCharges())
	n, err := shop.Charges()
	require.NoError(t, err)
	require.Equal(t, 3, n)
}

// shopBehindProxy serves a fresh shop behind a dupproxy configured by o
// (its Upstream set here), both on 127.0.0.1, and returns them, the
// proxy's URL and a client holding the session cookie of the shop's page.
func shopBehindProxy(t *testing.T, o dupproxy.Options) (*checkout.Shop, *dupproxy.Proxy, *httptest.Server, *http.Client) {
	t.Helper()
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "shop.db"), &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	shop, err := checkout.New(db, 0)
	require.NoError(t, err)
	up := httptest.NewServer(shop.Handler())
	t.Cleanup(up.Close)
	o.Upstream, err = url.Parse(up.URL)
	require.NoError(t, err)
	p, err := dupproxy.New(&o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	client := &http.Client{Jar: jar}
	resp, err := client.Get(front.URL + "/") // the page: the session cookie
	require.NoError(t, err)
	resp.Body.Close()
	return shop, p, front, client
}
