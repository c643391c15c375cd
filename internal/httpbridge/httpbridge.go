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

// New builds idemhttp's middleware over store; opts must be an
// *idemhttp.Options. It returns the middleware's Wrap, or the error
// idemhttp.New would (idemhttp.ErrInvalidOptions naming each bad field).
// It is nil until package idemhttp is initialised.
var New func(store idemcore.Store, opts any) (wrap func(http.Handler) http.Handler, err error)
