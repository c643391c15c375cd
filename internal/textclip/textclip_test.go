package textclip_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/textclip"
)

func TestClipCutsOnARuneBoundary(t *testing.T) {
	require.Equal(t, "short", textclip.Clip("short", 5))
	require.Equal(t, "abc...(6 bytes)", textclip.Clip("abcdef", 3))
	require.Equal(t, "a...(5 bytes)", textclip.Clip("aéé", 2), "é is two bytes: the cut goes before it")
	require.Equal(t, "...(2 bytes)", textclip.Clip("é", 1))
}
