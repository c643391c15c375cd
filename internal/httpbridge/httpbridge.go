// Package httpbridge lets a store adapter outside the root module build
// package idemhttp's middleware over its own idemcore.Store without
// idemhttp exporting a store interface: idemhttp sets New when it is
// linked in (an adapter importing idemhttp for its Options is enough), so
// the HTTP semantics exist once, in idemhttp.
package httpbridge

import (
	"net/http"

	"github.com/oncekv/oncekv/internal/idemcore"
)

// Middleware is what an *idemhttp.Middleware offers every store.
type Middleware interface {
	Wrap(next http.Handler) http.Handler
	WrapCanonicalJSON(next http.Handler) http.Handler
}

// New builds idemhttp's middleware over store; opts must be an
// *idemhttp.Options. It fails as idemhttp.New does
// (idemhttp.ErrInvalidOptions naming each bad field). It is nil until
// package idemhttp is initialised.
var New func(store idemcore.Store, opts any) (Middleware, error)
