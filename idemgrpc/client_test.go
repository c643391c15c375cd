package idemgrpc_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/oncekv/oncekv/idemgrpc"
)

// flaky fails the first n attempts of every call with UNAVAILABLE before
// the idempotency interceptor sees them (a proxy or a draining server),
// and records the key each attempt carried.
type flaky struct {
	mu   sync.Mutex
	n    int
	keys []string
}

func (f *flaky) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	f.keys = append(f.keys, md.Get(idemgrpc.KeyMetadata)...)
	fail := f.n > 0
	f.n--
	f.mu.Unlock()
	if fail {
		return nil, status.Error(codes.Unavailable, "try again")
	}
	return handler(ctx, req)
}

const retryUnavailable = `{"methodConfig":[{"name":[{"service":"grpc.testing.TestService"}],
	"retryPolicy":{"maxAttempts":4,"initialBackoff":"0.01s","maxBackoff":"0.05s","backoffMultiplier":2,
	"retryableStatusCodes":["UNAVAILABLE"]}}]}`

// The key the client interceptor mints is kept across grpc-go's policy
// retries: the server sees one key on every attempt, and the handler runs
// once.
func TestClientInterceptorKeepsTheKeyAcrossPolicyRetries(t *testing.T) {
	f := &flaky{n: 2}
	r := newRig(t, nil, &payments{}, nil, []grpc.UnaryServerInterceptor{f.intercept},
		grpc.WithDefaultServiceConfig(retryUnavailable), grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()))
	_, _, err := r.call(ctxFor(t), "alice", "", "p1")
	require.NoError(t, err)
	require.Len(t, f.keys, 3, "two failed attempts and the one that ran")
	require.NotEmpty(t, f.keys[0])
	require.Equal(t, f.keys[0], f.keys[1])
	require.Equal(t, f.keys[0], f.keys[2])
	require.EqualValues(t, 1, r.svc.runs.Load())
}

// A caller's own retry loop keeps the key when it mints it before the
// loop; the interceptor then adds none, and each logical call gets its own.
func TestCallersOwnRetriesKeepAKeyMintedBeforeTheLoop(t *testing.T) {
	f := &flaky{}
	r := newRig(t, nil, &payments{}, nil, []grpc.UnaryServerInterceptor{f.intercept},
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()))
	ctx := metadata.AppendToOutgoingContext(ctxFor(t), "x-user", "alice")

	logical := idemgrpc.WithNewKey(ctx) // once per logical call
	var answers []proto.Message
	for range 3 { // the caller retries, as after a timeout
		resp, err := r.client.UnaryCall(logical, payment1("p1"))
		require.NoError(t, err)
		answers = append(answers, resp)
	}
	require.True(t, proto.Equal(answers[0], answers[2]))
	require.EqualValues(t, 1, r.svc.runs.Load())
	key, ok := idemgrpc.OutgoingKey(logical)
	require.True(t, ok)
	require.Equal(t, []string{key, key, key}, f.keys)

	_, err := r.client.UnaryCall(ctx, payment1("p2")) // another logical call: a key of its own
	require.NoError(t, err)
	require.Len(t, f.keys, 4)
	require.NotEqual(t, key, f.keys[3])
	require.EqualValues(t, 2, r.svc.runs.Load())
}

func TestClientInterceptorCoversOnlyItsMethods(t *testing.T) {
	f := &flaky{}
	svc := &payments{reply: func(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		return &testgrpc.SimpleResponse{}, nil
	}}
	r := newRig(t, nil, svc, nil, []grpc.UnaryServerInterceptor{f.intercept},
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor("/grpc.testing.TestService/EmptyCall")))
	_, _, err := r.call(ctxFor(t), "alice", "", "p1")
	require.NoError(t, err)
	require.Empty(t, f.keys, "UnaryCall is not covered")
}

func TestNewKeysDiffer(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		k := idemgrpc.NewKey()
		require.Len(t, k, 32)
		require.False(t, seen[k])
		seen[k] = true
	}
}
