package idemgrpc_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemgrpc"
	"github.com/oncekv/oncekv/internal/oncetest"
)

func TestRetryAfterADroppedAnswerGetsTheStoredResponse(t *testing.T) {
	r := newRig(t, nil, &payments{}, nil, nil)
	ctx := ctxFor(t)
	first, tr1, err := r.call(ctx, "alice", "k1", "p1")
	require.NoError(t, err)
	require.Empty(t, tr1.Get(idemgrpc.ReplayedTrailer), "a first answer is not a replay")
	again, tr2, err := r.call(ctx, "alice", "k1", "p1")
	require.NoError(t, err)
	require.True(t, proto.Equal(first, again), "the retry got %v, the first call %v", again, first)
	require.Equal(t, []string{"true"}, tr2.Get(idemgrpc.ReplayedTrailer))
	require.EqualValues(t, 1, r.svc.runs.Load(), "the handler ran for the retry")
	n, has := charged(t, r.db, "p1")
	require.True(t, has)
	require.Equal(t, 1, n)
}

func TestConcurrentIdenticalCallsRunTheHandlerOnce(t *testing.T) {
	svc := &payments{block: make(chan struct{}), entered: make(chan string, 16)}
	r := newRig(t, nil, svc, &idemgrpc.Options{Lease: 2 * time.Second}, nil)
	ctx := ctxFor(t)
	type got struct {
		resp *testgrpc.SimpleResponse
		tr   metadata.MD
		err  error
	}
	first := make(chan got, 1)
	go func() {
		resp, tr, err := r.call(ctx, "alice", "same", "p1")
		first <- got{resp, tr, err}
	}()
	<-svc.entered // the first call holds the key and waits in its handler
	var wg sync.WaitGroup
	others := make([]got, 8)
	for i := range others {
		wg.Go(func() {
			resp, tr, err := r.call(ctx, "alice", "same", "p1")
			others[i] = got{resp, tr, err}
		})
	}
	wg.Wait()
	for i, o := range others {
		require.Equal(t, codes.Aborted, status.Code(o.err), "call %d: %v", i, o.err)
		ms, err := strconv.Atoi(o.tr.Get(idemgrpc.PushbackTrailer)[0])
		require.NoError(t, err)
		require.Greater(t, ms, 0)
		require.LessOrEqual(t, ms, 2000, "the pushback is the time left on the lease")
	}
	close(svc.block)
	f := <-first
	require.NoError(t, f.err)
	for range 3 {
		resp, tr, err := r.call(ctx, "alice", "same", "p1")
		require.NoError(t, err)
		require.True(t, proto.Equal(f.resp, resp))
		require.Equal(t, []string{"true"}, tr.Get(idemgrpc.ReplayedTrailer))
	}
	require.EqualValues(t, 1, svc.runs.Load())
}

// With grpc-go's retry policy retrying ABORTED, concurrent identical calls
// all end with the one answer: the refused ones wait out the pushback and
// get the replay.
func TestConcurrentCallsWithARetryPolicyAllGetTheOneAnswer(t *testing.T) {
	svc := &payments{block: make(chan struct{})}
	const cfg = `{"methodConfig":[{"name":[{"service":"grpc.testing.TestService"}],
		"retryPolicy":{"maxAttempts":5,"initialBackoff":"0.05s","maxBackoff":"1s","backoffMultiplier":2,
		"retryableStatusCodes":["ABORTED"]}}]}`
	r := newRig(t, nil, svc, &idemgrpc.Options{Lease: 2 * time.Second}, nil, grpc.WithDefaultServiceConfig(cfg))
	ctx := ctxFor(t)
	go func() { time.Sleep(300 * time.Millisecond); close(svc.block) }()
	var wg sync.WaitGroup
	resps := make([]*testgrpc.SimpleResponse, 6)
	errs := make([]error, len(resps))
	for i := range resps {
		wg.Go(func() { resps[i], _, errs[i] = r.call(ctx, "alice", "same", "p1") })
	}
	wg.Wait()
	for i := range resps {
		require.NoError(t, errs[i], "call %d", i)
		require.True(t, proto.Equal(resps[0], resps[i]))
	}
	require.EqualValues(t, 1, svc.runs.Load())
}

func TestAnotherCallersKeyNeverAnswers(t *testing.T) {
	r := newRig(t, nil, &payments{}, nil, nil)
	ctx := ctxFor(t)
	a, _, err := r.call(ctx, "alice", "k", "pa")
	require.NoError(t, err)
	b, tr, err := r.call(ctx, "bob", "k", "pb")
	require.NoError(t, err)
	require.Empty(t, tr.Get(idemgrpc.ReplayedTrailer))
	require.False(t, proto.Equal(a, b), "bob got alice's answer")
	require.EqualValues(t, 2, r.svc.runs.Load())
}

func TestKeyReuseWithAnotherRequestIsFailedPrecondition(t *testing.T) {
	r := newRig(t, nil, &payments{}, nil, nil)
	ctx := ctxFor(t)
	_, _, err := r.call(ctx, "alice", "k", "p1")
	require.NoError(t, err)
	_, _, err = r.call(ctx, "alice", "k", "p2")
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.EqualValues(t, 1, r.svc.runs.Load())
}

func TestFingerprintMetadataTakesPart(t *testing.T) {
	r := newRig(t, nil, &payments{}, &idemgrpc.Options{FingerprintMetadata: []string{"X-Currency"}}, nil)
	ctx := ctxFor(t)
	_, _, err := r.call(metadata.AppendToOutgoingContext(ctx, "x-currency", "EUR"), "alice", "k", "p1")
	require.NoError(t, err)
	_, _, err = r.call(metadata.AppendToOutgoingContext(ctx, "x-currency", "USD"), "alice", "k", "p1")
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	_, tr, err := r.call(metadata.AppendToOutgoingContext(ctx, "x-currency", "EUR"), "alice", "k", "p1")
	require.NoError(t, err)
	require.Equal(t, []string{"true"}, tr.Get(idemgrpc.ReplayedTrailer))
}

func TestCallsWithoutAKey(t *testing.T) {
	ctx := ctxFor(t)
	t.Run("pass through by default", func(t *testing.T) {
		r := newRig(t, nil, &payments{reply: func(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
			return &testgrpc.SimpleResponse{}, nil
		}}, nil, nil)
		for range 2 {
			_, _, err := r.call(ctx, "alice", "", "p1")
			require.NoError(t, err)
		}
		require.EqualValues(t, 2, r.svc.runs.Load())
	})
	t.Run("INVALID_ARGUMENT with RequireKey", func(t *testing.T) {
		r := newRig(t, nil, &payments{}, &idemgrpc.Options{RequireKey: true}, nil)
		_, _, err := r.call(ctx, "alice", "", "p1")
		require.Equal(t, codes.InvalidArgument, status.Code(err))
		require.ErrorContains(t, err, idemgrpc.KeyMetadata)
		require.Zero(t, r.svc.runs.Load())
	})
}

func TestBadKeysAreInvalidArgument(t *testing.T) {
	r := newRig(t, nil, &payments{}, nil, nil)
	ctx := ctxFor(t)
	for name, md := range map[string]metadata.MD{
		"twice":    metadata.Pairs(idemgrpc.KeyMetadata, "a", idemgrpc.KeyMetadata, "b"),
		"too long": metadata.Pairs(idemgrpc.KeyMetadata, strings.Repeat("k", 300)),
		"empty":    metadata.Pairs(idemgrpc.KeyMetadata, ""),
	} {
		_, _, err := r.call(metadata.NewOutgoingContext(ctx, md), "alice", "", "p1")
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", name, err)
	}
	require.Zero(t, r.svc.runs.Load())
}

func TestAnUnidentifiedCallerIsUnauthenticated(t *testing.T) {
	r := newRig(t, nil, &payments{}, nil, nil)
	_, _, err := r.call(ctxFor(t), "", "k", "p1")
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	require.Zero(t, r.svc.runs.Load())
}

func TestErrorStatusesStoredOrReleased(t *testing.T) {
	ctx := ctxFor(t)
	t.Run("a client error is stored and replayed", func(t *testing.T) {
		svc := &payments{reply: func(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
			return nil, status.Error(codes.InvalidArgument, "card declined")
		}}
		r := newRig(t, nil, svc, nil, nil)
		_, _, err := r.call(ctx, "alice", "k", "p1")
		require.Equal(t, codes.InvalidArgument, status.Code(err))
		_, tr, err := r.call(ctx, "alice", "k", "p1")
		require.Equal(t, codes.InvalidArgument, status.Code(err))
		require.Equal(t, "card declined", status.Convert(err).Message())
		require.Equal(t, []string{"true"}, tr.Get(idemgrpc.ReplayedTrailer))
		require.EqualValues(t, 1, svc.runs.Load())
	})
	t.Run("a server error releases the key", func(t *testing.T) {
		var fail = true
		svc := &payments{}
		svc.reply = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
			if fail {
				fail = false
				return nil, status.Error(codes.Unavailable, "gateway down")
			}
			return &testgrpc.SimpleResponse{Username: "ok"}, nil
		}
		r := newRig(t, nil, svc, nil, nil)
		_, _, err := r.call(ctx, "alice", "k", "p1")
		require.Equal(t, codes.Unavailable, status.Code(err))
		resp, tr, err := r.call(ctx, "alice", "k", "p1")
		require.NoError(t, err)
		require.Equal(t, "ok", resp.GetUsername())
		require.Empty(t, tr.Get(idemgrpc.ReplayedTrailer), "the retry ran afresh")
		require.EqualValues(t, 2, svc.runs.Load())
	})
	t.Run("Options.Store decides", func(t *testing.T) {
		svc := &payments{reply: func(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
			return nil, status.Error(codes.NotFound, "no such account")
		}}
		r := newRig(t, nil, svc, &idemgrpc.Options{Store: func(c codes.Code) bool { return c == codes.OK }}, nil)
		for range 2 {
			_, _, err := r.call(ctx, "alice", "k", "p1")
			require.Equal(t, codes.NotFound, status.Code(err))
		}
		require.EqualValues(t, 2, svc.runs.Load())
	})
}

func TestAPanicReleasesTheKey(t *testing.T) {
	var panicked bool
	svc := &payments{}
	svc.reply = func(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		if !panicked {
			panicked = true
			panic("boom")
		}
		return &testgrpc.SimpleResponse{Username: "ok"}, nil
	}
	r := newRig(t, nil, svc, nil, nil)
	ctx := ctxFor(t)
	_, _, err := r.call(ctx, "alice", "k", "p1")
	require.ErrorContains(t, err, "boom")
	resp, _, err := r.call(ctx, "alice", "k", "p1")
	require.NoError(t, err, "the key stayed held after the panic")
	require.Equal(t, "ok", resp.GetUsername())
}

func TestStagedWritesCommitWithTheAnswer(t *testing.T) {
	ctx := ctxFor(t)
	t.Run("once, with the answer", func(t *testing.T) {
		r := newRig(t, nil, &payments{}, nil, nil)
		for range 3 {
			_, _, err := r.call(ctx, "alice", "k", "p1")
			require.NoError(t, err)
		}
		n, has := charged(t, r.db, "p1")
		require.True(t, has)
		require.Equal(t, 1, n)
	})
	t.Run("a failing write stores nothing and releases the key", func(t *testing.T) {
		var failWrite = true
		svc := &payments{}
		svc.reply = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
			must := failWrite
			failWrite = false
			require.NoError(t, idemgrpc.Stage(ctx, func(tx *oncekv.Tx) error {
				b, err := tx.CreateBucketIfNotExists(paymentsBucket)
				if err != nil {
					return err
				}
				if err := b.Put(req.GetPayload().GetBody(), []byte("charged")); err != nil {
					return err
				}
				if must {
					return errors.New("ledger full")
				}
				return nil
			}))
			return &testgrpc.SimpleResponse{Username: "ok"}, nil
		}
		r := newRig(t, nil, svc, nil, nil)
		_, _, err := r.call(ctx, "alice", "k", "p1")
		require.Equal(t, codes.Internal, status.Code(err), "%v", err)
		n, _ := charged(t, r.db, "p1")
		require.Zero(t, n, "a write of a failed commit stayed")
		_, _, err = r.call(ctx, "alice", "k", "p1")
		require.NoError(t, err)
		n, _ = charged(t, r.db, "p1")
		require.Equal(t, 1, n)
	})
	t.Run("Stage outside a claimed call", func(t *testing.T) {
		require.ErrorIs(t, idemgrpc.Stage(ctx, func(*oncekv.Tx) error { return nil }), idemgrpc.ErrNoClaim)
	})
}

func TestDoNotStoreForgetsTheKey(t *testing.T) {
	svc := &payments{}
	svc.reply = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		require.True(t, idemgrpc.DoNotStore(ctx))
		return nil, status.Error(codes.ResourceExhausted, "rate limited")
	}
	r := newRig(t, nil, svc, &idemgrpc.Options{Store: func(codes.Code) bool { return true }}, nil)
	ctx := ctxFor(t)
	_, _, err := r.call(ctx, "alice", "k", "p1")
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	_, _, err = r.call(ctx, "alice", "k", "another payload: the key was forgotten")
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	require.EqualValues(t, 2, svc.runs.Load())
}

// A stored answer is replayed by a server started later on the same file,
// which never ran the handler: the response type comes from the registry.
func TestReplayAfterRestart(t *testing.T) {
	path := t.TempDir() + "/grpc.db"
	db, err := oncekv.Open(path, nil)
	require.NoError(t, err)
	r := newRig(t, db, &payments{}, nil, nil)
	ctx := ctxFor(t)
	first, _, err := r.call(ctx, "alice", "k", "p1")
	require.NoError(t, err)
	require.NoError(t, r.conn.Close())
	require.NoError(t, db.Close())

	db2, err := oncekv.Open(path, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db2.Close() })
	r2 := newRig(t, db2, &payments{}, nil, nil)
	again, tr, err := r2.call(ctx, "alice", "k", "p1")
	require.NoError(t, err)
	require.True(t, proto.Equal(first, again))
	require.Equal(t, []string{"true"}, tr.Get(idemgrpc.ReplayedTrailer))
	require.Zero(t, r2.svc.runs.Load())
}

func TestHeadersAndTrailersAreReplayed(t *testing.T) {
	svc := &payments{}
	svc.reply = func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
		require.NoError(t, grpc.SetHeader(ctx, metadata.Pairs("location", "/payments/p1")))
		require.NoError(t, grpc.SetTrailer(ctx, metadata.Pairs("x-ledger", "42")))
		return &testgrpc.SimpleResponse{Username: "ok"}, nil
	}
	r := newRig(t, nil, svc, nil, nil)
	ctx := ctxFor(t)
	for i := range 2 {
		var header, trailer metadata.MD
		_, err := r.client.UnaryCall(idemgrpc.WithKey(metadata.AppendToOutgoingContext(ctx, "x-user", "alice"), "k"),
			payment1("p1"), grpc.Header(&header), grpc.Trailer(&trailer))
		require.NoError(t, err)
		require.Equal(t, []string{"/payments/p1"}, header.Get("location"), "call %d", i)
		require.Equal(t, []string{"42"}, trailer.Get("x-ledger"), "call %d", i)
	}
	require.EqualValues(t, 1, svc.runs.Load())
}

func TestNewRefusesBadOptions(t *testing.T) {
	db := oncetest.Open(t, nil)
	_, err := idemgrpc.New(nil, &idemgrpc.Options{Scope: scopeFromMetadata})
	require.ErrorIs(t, err, idemgrpc.ErrInvalidOptions)
	_, err = idemgrpc.New(db, nil)
	require.ErrorIs(t, err, idemgrpc.ErrInvalidOptions)
	require.ErrorContains(t, err, "Scope")
	_, err = idemgrpc.New(db, &idemgrpc.Options{Scope: scopeFromMetadata, Lease: time.Second, Heartbeat: 2 * time.Second})
	require.ErrorContains(t, err, "Heartbeat")
	_, err = idemgrpc.New(db, &idemgrpc.Options{Scope: scopeFromMetadata, MaxRecordBytes: -1})
	require.ErrorContains(t, err, "MaxRecordBytes")
}

// After Retention a tombstone still says the call was applied, though its
// answer is gone: the retry gets ALREADY_EXISTS, and the handler does not
// run again.
func TestARetryMeetingATombstoneIsAlreadyExists(t *testing.T) {
	clock := oncetest.NewClock(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	db := oncetest.Open(t, &oncekv.Options{NoSync: true, Now: clock.Now, ExpireInterval: -1,
		Retention: 2 * time.Hour, WindowSpan: time.Hour, TombstoneRetention: 24 * time.Hour})
	r := newRig(t, db, &payments{}, nil, nil)
	ctx := ctxFor(t)
	_, _, err := r.call(ctx, "alice", "k", "p1")
	require.NoError(t, err)
	clock.Advance(4 * time.Hour)
	st, err := db.Expire(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Tombstones)
	_, tr, err := r.call(ctx, "alice", "k", "p1")
	require.Equal(t, codes.AlreadyExists, status.Code(err), "%v", err)
	require.Equal(t, []string{"true"}, tr.Get(idemgrpc.ReplayedTrailer))
	require.EqualValues(t, 1, r.svc.runs.Load())
}
