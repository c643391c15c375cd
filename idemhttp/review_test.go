package idemhttp_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/idemhttptest"
)

// A Middleware not made by New, or a nil handler, is refused when the
// server is wired up, not by letting requests through unprotected (a zero
// Middleware used to serve every request without a key check) or by a
// panic on every request (Wrap(nil) used to).
func TestWrapRefusesAMiddlewareNotMadeByNewAndANilHandler(t *testing.T) {
	var zero idemhttp.Middleware
	require.PanicsWithValue(t, "idemhttp: Wrap on a Middleware not made by New", func() { zero.Wrap(idemhttptest.Echo) })
	var nilMW *idemhttp.Middleware
	require.Panics(t, func() { nilMW.Wrap(idemhttptest.Echo) })

	mw, err := idemhttp.New(openDB(t, idemhttptest.NewClock().Now, nil), &idemhttp.Options{Scope: idemhttptest.UserScope})
	require.NoError(t, err)
	require.PanicsWithValue(t, "idemhttp: Wrap of a nil handler", func() { mw.Wrap(nil) })
	require.NotNil(t, mw.Wrap(idemhttptest.Echo))
}
