package dumpfile_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/dumpfile"
)

func lines() []*dumpfile.Line {
	t0 := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	m := oncekv.MarkInfo{Handler: "pay", Key: "k\xff", State: oncekv.MarkDone, FirstSeen: t0, Window: t0,
		Response: []byte{0, 1}, Token: 3}
	m.Fingerprint[0] = 0xab
	return []*dumpfile.Line{
		{Type: dumpfile.TypeMark, Mark: m},
		{Type: dumpfile.TypeBucket, Bucket: []byte("b")},
		{Type: dumpfile.TypeKV, Bucket: []byte("b"), Key: []byte{0xff, 0}, Value: []byte("v")},
		{Type: dumpfile.TypeKV, Bucket: []byte("b"), Key: []byte("empty"), Value: []byte{}},
		{Type: dumpfile.TypeBucket, Bucket: []byte("seq"), Sequence: 41},
		{Type: dumpfile.TypeKV, Bucket: []byte("seq"), Key: []byte("f"), Value: []byte("v"), Fence: 9, Version: 3},
		{Type: dumpfile.TypeFence, Bucket: []byte("seq"), Key: []byte("gone"), Fence: 7, Version: 2},
		{Type: dumpfile.TypeCounter, Resource: "oncekv.queue.jobs", Last: 12},
		{Type: dumpfile.TypeCounter, Last: 5},
	}
}

func TestWriteThenReadGivesEveryLineBack(t *testing.T) {
	var buf bytes.Buffer
	w := dumpfile.NewWriter(&buf)
	for _, l := range lines() {
		require.NoError(t, w.Write(l))
	}
	require.NoError(t, w.Flush())
	require.Contains(t, buf.String(), `{"base64":"/wA="}`)
	r := dumpfile.NewReader(strings.NewReader(buf.String() + "\n  \n"))
	for _, want := range lines() {
		got, err := r.Next()
		require.NoError(t, err)
		require.Equal(t, want.Type, got.Type)
		require.Equal(t, want.Bucket, got.Bucket)
		require.Equal(t, want.Key, got.Key)
		require.Equal(t, want.Value, got.Value)
		require.Equal(t, want.Fence, got.Fence)
		require.Equal(t, want.Version, got.Version)
		require.Equal(t, want.Sequence, got.Sequence)
		require.Equal(t, want.Resource, got.Resource)
		require.Equal(t, want.Last, got.Last)
		if want.Type == dumpfile.TypeMark {
			require.Equal(t, want.Mark.Key, got.Mark.Key)
			require.Equal(t, want.Mark.Response, got.Mark.Response)
			require.Equal(t, want.Mark.Fingerprint, got.Mark.Fingerprint)
			require.True(t, want.Mark.FirstSeen.Equal(got.Mark.FirstSeen))
		}
	}
	_, err := r.Next()
	require.ErrorIs(t, err, io.EOF)
}

func TestBadLinesAreTypedErrorsNamingTheLine(t *testing.T) {
	good := `{"type":"bucket","bucket":"b"}` + "\n"
	for _, c := range []struct {
		line string
		want error
		text string
	}{
		{`not json`, dumpfile.ErrSyntax, "not a JSON object"},
		{`{"type":"bucket","bucket":"b"} {"x":1}`, dumpfile.ErrSyntax, "more after the object"},
		{`{"type":"nonsense"}`, dumpfile.ErrUnknownType, `unknown line type "nonsense"`},
		{`{"type":"kv","bucket":"b","key":"k"}`, dumpfile.ErrInvalidLine, "needs a key and a value"},
		{`{"type":"fence","bucket":"b","key":"k"}`, dumpfile.ErrInvalidLine, "needs a fence or a version"},
		{`{"type":"counter","resource":"","last":1}`, dumpfile.ErrInvalidLine, "resource is empty"},
		{`{"type":"kv","key":"k","value":"v"}`, dumpfile.ErrInvalidLine, "needs a bucket"},
		{`{"type":"mark","handler":"h","key":"k","state":"MAYBE"}`, dumpfile.ErrInvalidLine, `unknown state "MAYBE"`},
		{`{"type":"mark","handler":"h","key":"k","state":"DONE","fingerprint":"00ff"}`, dumpfile.ErrInvalidLine, `fingerprint "00ff" is not 16 or 32 hex bytes`},
		{`{"type":"kv","bucket":{"base64":1},"key":"k","value":"v"}`, dumpfile.ErrSyntax, "base64"},
	} {
		r := dumpfile.NewReader(strings.NewReader(good + "\n" + c.line + "\n" + good))
		_, err := r.Next()
		require.NoError(t, err)
		_, err = r.Next()
		require.ErrorIs(t, err, c.want, c.line)
		var le *dumpfile.LineError
		require.True(t, errors.As(err, &le), c.line)
		require.Equal(t, 3, le.Line, c.line) // the blank line counts
		require.Contains(t, err.Error(), "line 3: ")
		require.Contains(t, err.Error(), c.text)
	}
}

func TestWriteRefusesAnUnknownType(t *testing.T) {
	w := dumpfile.NewWriter(io.Discard)
	require.ErrorIs(t, w.Write(&dumpfile.Line{Type: "nonsense"}), dumpfile.ErrUnknownType)
}
