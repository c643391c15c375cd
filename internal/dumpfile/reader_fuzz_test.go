package dumpfile_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/dumpfile"
)

// FuzzReader: no line makes the reader panic, and a line it accepts is
// written back to a line it reads the same.
func FuzzReader(f *testing.F) {
	var buf bytes.Buffer
	w := dumpfile.NewWriter(&buf)
	for _, l := range lines() {
		_ = w.Write(l)
	}
	_ = w.Flush()
	for _, s := range strings.Split(buf.String(), "\n") {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"type":"kv","bucket":"b","key":"k","value":{"base64":"AA=="}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if bytes.IndexByte(b, '\n') >= 0 {
			return
		}
		l, err := dumpfile.NewReader(bytes.NewReader(b)).Next()
		if err != nil {
			return
		}
		var out bytes.Buffer
		w := dumpfile.NewWriter(&out)
		require.NoError(t, w.Write(l))
		require.NoError(t, w.Flush())
		again, err := dumpfile.NewReader(&out).Next()
		require.NoError(t, err, out.String())
		require.Equal(t, l.Bucket, again.Bucket)
		require.Equal(t, l.Key, again.Key)
		require.Equal(t, l.Value, again.Value)
		require.Equal(t, l.Mark.Key, again.Mark.Key)
		require.Equal(t, []uint64{l.Fence, l.Version, l.Sequence, l.Last}, []uint64{again.Fence, again.Version, again.Sequence, again.Last})
		require.Equal(t, l.Resource, again.Resource)
	})
}
