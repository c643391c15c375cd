package edgeagent_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	edgeagent "github.com/oncekv/oncekv/examples/edge-agent"
	"github.com/oncekv/oncekv/relay"
)

// A reading whose id cannot be an Idempotency-Key is refused by Record,
// not recorded to end in the dead letters.
func TestRecordRefusesAnIDThatCannotTravel(t *testing.T) {
	a, err := edgeagent.Open(filepath.Join(t.TempDir(), "agent.db"), "http://127.0.0.1:1/ingest", nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, a.Close()) }()
	for _, id := range []string{"a\nb", " r1", "r1\x00"} {
		_, err := a.Record(context.Background(), edgeagent.Reading{ID: id, Sensor: "s", Value: 1})
		require.ErrorIs(t, err, relay.ErrInvalidKey, "%q", id)
	}
	st, err := a.Queue().Stats()
	require.NoError(t, err)
	require.Zero(t, st.Depth, "nothing recorded")
	dup, err := a.Record(context.Background(), edgeagent.Reading{ID: "r1", Sensor: "s", Value: 1})
	require.NoError(t, err)
	require.False(t, dup)
}
