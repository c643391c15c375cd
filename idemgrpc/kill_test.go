//go:build unix

package idemgrpc_test

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemgrpc"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// waitFor returns the rest of the child's first line starting with
// prefix.
func waitFor(t *testing.T, c *oncetest.Child, prefix string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-c.Lines:
			require.True(t, ok, "the child exited before saying %s", prefix)
			if rest, found := strings.CutPrefix(line, prefix+" "); found {
				return rest
			}
		case <-timeout:
			t.Fatalf("the child did not say %s", prefix)
		}
	}
}

func dialChild(t *testing.T, addr string) testgrpc.TestServiceClient {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return testgrpc.NewTestServiceClient(conn)
}

// A server SIGKILLed in the middle of a handler leaves nothing stored and
// the key free once the file is opened again: the retry on the restarted
// server runs the handler and charges once, and later retries get its
// answer.
func TestAServerKilledMidHandlerReleasesTheKey(t *testing.T) {
	path := t.TempDir() + "/grpc.db"
	ctx := metadata.AppendToOutgoingContext(ctxFor(t), "x-user", "alice")
	call := idemgrpc.WithKey(ctx, "pay-1")
	for round := range 3 {
		hung := oncetest.StartChild(t, childEnv, &childConfig{DB: path, Hang: true})
		client := dialChild(t, waitFor(t, hung, "ADDR"))
		done := make(chan error, 1)
		go func() { _, err := client.UnaryCall(call, payment1("p1")); done <- err }()
		waitFor(t, hung, "ENTERED")
		require.NoError(t, hung.Cmd.Process.Signal(syscall.SIGKILL), "round %d", round)
		_ = hung.Cmd.Wait()
		require.Error(t, <-done, "the killed server answered")
	}

	db, err := oncekv.Open(path, nil)
	require.NoError(t, err)
	n, _ := charged(t, db, "p1")
	require.Zero(t, n, "a killed handler's staged write was kept")
	require.NoError(t, db.Close())

	server := oncetest.StartChild(t, childEnv, &childConfig{DB: path})
	client := dialChild(t, waitFor(t, server, "ADDR"))
	first, err := client.UnaryCall(call, payment1("p1"))
	require.NoError(t, err, "the key stayed held after the kills")
	var trailer metadata.MD
	again, err := client.UnaryCall(call, payment1("p1"), grpc.Trailer(&trailer))
	require.NoError(t, err)
	require.True(t, proto.Equal(first, again))
	require.Equal(t, []string{"true"}, trailer.Get(idemgrpc.ReplayedTrailer))
	require.NoError(t, server.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, server.Cmd.Wait())

	db, err = oncekv.Open(path, nil)
	require.NoError(t, err)
	defer db.Close()
	n, has := charged(t, db, "p1")
	require.True(t, has)
	require.Equal(t, 1, n)
}
