package dupproxy_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/dupproxy"
)

// Each mask syntax hides what it names, and only that: two answers that
// differ elsewhere still differ.
func TestMasksHideTheFieldsTheyName(t *testing.T) {
	for _, tc := range []struct {
		mask       string
		a, b, diff string
	}{
		{"$.at", `{"at":1,"n":1}`, `{"at":2,"n":1}`, ""},
		{"at", `{"at":1,"n":1}`, `{"at":2,"n":2}`, "body $.n: 1 vs 2"},
		{"$.items[*].id", `{"items":[{"id":1,"q":1},{"id":2,"q":1}]}`, `{"items":[{"id":3,"q":1},{"id":4,"q":1}]}`, ""},
		{"$.items[1].id", `{"items":[{"id":1},{"id":2}]}`, `{"items":[{"id":9},{"id":3}]}`, "body $.items[0].id: 1 vs 9"},
		{"$..rid", `{"a":{"rid":1,"b":[{"rid":2}]},"rid":3}`, `{"a":{"rid":4,"b":[{"rid":5}]},"rid":6}`, ""},
		{"$.meta.*", `{"meta":{"x":1,"y":2},"v":1}`, `{"meta":{"x":3,"y":4},"v":1}`, ""},
		{"$['odd.name']", `{"odd.name":1}`, `{"odd.name":2}`, ""},
		{"$.at", `{"at":1}`, `{}`, `body $.at: "<masked>" vs absent`},
		{"$.list", `{"list":[1,2]}`, `{"list":[1,2,3]}`, ""},
		{"$.x", `{"list":[1,2]}`, `{"list":[1,2,3]}`, "body $.list: 2 items vs 3"},
		{"$.x", `[1]`, `{"a":1}`, `body $: [1] vs {"a":1}`},
		{"$.x", `12.50`, `12.5`, "body $: 12.50 vs 12.5"},
	} {
		t.Run(tc.mask+" "+tc.a, func(t *testing.T) {
			require.Equal(t, tc.diff, dupproxy.Compare(200, tc.a, 200, tc.b, []string{tc.mask}))
		})
	}
}

// A bad mask is refused by New, saying which and why.
func TestBadMasksAreRefused(t *testing.T) {
	for _, m := range []string{"$", "", "$.", "$..", "$.a[", "$.a[-1]", "$.a[x]", "$['a'", "$.a.."} {
		_, err := dupproxy.New(&dupproxy.Options{Upstream: mustURL(t, "http://127.0.0.1:1"), Mask: []string{m}})
		require.ErrorIs(t, err, dupproxy.ErrInvalidOptions, "mask %q", m)
		require.Contains(t, err.Error(), fmt.Sprintf("Mask %q", m))
	}
}

// Without JSON, bodies are compared byte for byte; headers only when named.
func TestCompareStatusHeadersAndBodies(t *testing.T) {
	require.Equal(t, "status 201 vs 409", dupproxy.Compare(201, "a", 409, "a", nil))
	require.Equal(t, `body "receipt 1" vs "receipt 2"`, dupproxy.Compare(200, "receipt 1", 200, "receipt 2", nil))
	require.Empty(t, dupproxy.Compare(200, "same", 200, "same", nil))
	require.Equal(t, `body $.a: "<masked>" vs absent`, dupproxy.Compare(200, `{"a":"x"}`, 200, `{}`, []string{"$.a"}))

	var n atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", fmt.Sprint("/orders/", n.Add(1)))
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	named, srv := newProxy(t, up.URL, dupproxy.Options{CompareHeaders: []string{"location"}})
	unnamed, srv2 := newProxy(t, up.URL, dupproxy.Options{})
	for _, base := range []struct {
		url string
		p   *dupproxy.Proxy
	}{{srv.URL, named}, {srv2.URL, unnamed}} {
		resp, err := http.Post(base.url+"/orders", "text/plain", nil)
		require.NoError(t, err)
		resp.Body.Close()
		settle(t, base.p)
	}
	w := row(t, settle(t, named), "POST /orders", dupproxy.WithoutKey)
	require.Equal(t, uint64(1), w.Differed)
	require.Equal(t, `header Location: "/orders/1" vs "/orders/2"`, w.Examples[0].Difference)
	require.Zero(t, row(t, settle(t, unnamed), "POST /orders", dupproxy.WithoutKey).Differed)
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}
