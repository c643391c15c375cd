package dupproxy

import (
	"net/http"
	"slices"
	"strings"
)

// otherRoutes is the report's row for the routes past Options.MaxRoutes.
const otherRoutes = "(other routes)"

// router names the route of a request and says whether it may be copied.
type router struct {
	mux     *http.ServeMux // Options.Routes; nil when there are none
	methods []string
}

func newRouter(o *Options) (*router, error) {
	r := &router{methods: o.Methods}
	if len(o.Routes) == 0 {
		return r, nil
	}
	r.mux = http.NewServeMux()
	for _, p := range o.Routes {
		if err := register(r.mux, p); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// register adds pattern to mux, turning ServeMux's panic on a bad or
// duplicate pattern into an error.
func register(mux *http.ServeMux, pattern string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = errorf("Routes: %q: %v", pattern, p)
		}
	}()
	mux.Handle(pattern, http.NotFoundHandler())
	return nil
}

// route returns r's route and whether r may be copied: a request matching
// one of Options.Routes, named by its pattern; without Routes, a request
// whose method is one of Options.Methods, named by its method and folded
// path. An upgrade (WebSocket) is never copied.
func (rt *router) route(r *http.Request) (string, bool) {
	if r.Header.Get("Upgrade") != "" {
		return "", false
	}
	if rt.mux != nil {
		_, pattern := rt.mux.Handler(r)
		return pattern, pattern != ""
	}
	if !slices.Contains(rt.methods, r.Method) {
		return "", false
	}
	return r.Method + " " + foldPath(r.URL.Path), true
}

// foldPath replaces the segments of path that look like ids with "{id}",
// so that /orders/42 and /orders/43 are one route.
func foldPath(path string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		if looksLikeID(s) {
			segs[i] = "{id}"
		}
	}
	return strings.Join(segs, "/")
}

// looksLikeID reports whether a path segment is an id rather than a
// name: all digits, or 16 or more characters of which some are digits
// (UUIDs, hex, base64url tokens).
func looksLikeID(s string) bool {
	if s == "" {
		return false
	}
	digits := 0
	for _, c := range s {
		if c >= '0' && c <= '9' {
			digits++
		}
	}
	return digits == len(s) || (len(s) >= 16 && digits > 0)
}
