package idemhttp

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSentValueIsWhatNetHTTPWrites(t *testing.T) {
	for in, want := range map[string]string{
		"/a\nb":       "/a b",
		" x\r\ny\t ":  "x  y",
		"plain":       "plain",
		"\n\n":        "",
		"tab\tinside": "tab\tinside",
	} {
		got, ok := sentValue(in)
		require.True(t, ok, in)
		require.Equal(t, want, got, "%q", in)
		_, err := decodeRecord(appendHeaders([]byte{recordVersion, 0, 0, 200, 0, 0, 0, 0}, []header{{"Location", got}}))
		require.NoError(t, err, "%q decodes", got)
	}
	_, ok := sentValue("a\x00b")
	require.False(t, ok, "a NUL byte is not kept")
}
