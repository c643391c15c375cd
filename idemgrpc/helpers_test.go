package idemgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemgrpc"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// payments is the tests' service: UnaryCall charges the payment named by
// the request's payload body, writing its row through Stage, and answers
// with a receipt numbered by how many times it ran.
type payments struct {
	testgrpc.UnimplementedTestServiceServer
	runs    atomic.Int64
	block   chan struct{} // when set, each run waits for it to close
	entered chan string   // when set, each run sends its key first
	reply   func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error)
}

var paymentsBucket = []byte("payments")

func (p *payments) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	n := p.runs.Add(1)
	key, _ := idemgrpc.Key(ctx)
	if p.entered != nil {
		p.entered <- key
	}
	if p.block != nil {
		select {
		case <-p.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if p.reply != nil {
		return p.reply(ctx, req)
	}
	id := req.GetPayload().GetBody()
	err := idemgrpc.Stage(ctx, func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(paymentsBucket)
		if err != nil {
			return err
		}
		if b.Get(id) != nil {
			return fmt.Errorf("payment %s charged twice", id)
		}
		return b.Put(id, []byte("charged"))
	})
	if err != nil {
		return nil, err
	}
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: []byte(fmt.Sprintf("receipt %s #%d", id, n))}}, nil
}

// scopeFromMetadata is the tests' Options.Scope: the caller is the
// "x-user" metadata entry (a real server would read what its auth
// interceptor verified).
func scopeFromMetadata(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if vs := md.Get("x-user"); len(vs) == 1 {
		return vs[0], nil
	}
	return "", errors.New("no x-user")
}

// recoverPanics is the server's outermost interceptor in the tests: a
// panicking handler answers INTERNAL instead of ending the test binary.
func recoverPanics(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	return handler(ctx, req)
}

// rig is a server with the interceptor over a store, and a client
// connected to it in memory.
type rig struct {
	db     *oncekv.DB
	svc    *payments
	client testgrpc.TestServiceClient
	conn   *grpc.ClientConn
}

// newRig serves svc behind the interceptor over db (a new store when nil),
// with extra server interceptors before it and client dial options.
func newRig(t *testing.T, db *oncekv.DB, svc *payments, opts *idemgrpc.Options, before []grpc.UnaryServerInterceptor, dial ...grpc.DialOption) *rig {
	t.Helper()
	if db == nil {
		db = oncetest.Open(t, nil)
	}
	if opts == nil {
		opts = &idemgrpc.Options{}
	}
	if opts.Scope == nil {
		opts.Scope = scopeFromMetadata
	}
	s, err := idemgrpc.New(db, opts)
	require.NoError(t, err)
	chain := append([]grpc.UnaryServerInterceptor{recoverPanics}, before...)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(append(chain, s.UnaryServerInterceptor())...))
	testgrpc.RegisterTestServiceServer(srv, svc)
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	dial = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
	}, dial...)
	conn, err := grpc.NewClient("passthrough:///bufnet", dial...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &rig{db: db, svc: svc, client: testgrpc.NewTestServiceClient(conn), conn: conn}
}

// call sends a payment as user with key (none when empty) and returns the
// response, the trailer and the error.
func (r *rig) call(ctx context.Context, user, key, payment string) (*testgrpc.SimpleResponse, metadata.MD, error) {
	if user != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-user", user)
	}
	if key != "" {
		ctx = idemgrpc.WithKey(ctx, key)
	}
	var trailer metadata.MD
	resp, err := r.client.UnaryCall(ctx, payment1(payment), grpc.Trailer(&trailer))
	return resp, trailer, err
}

func payment1(id string) *testgrpc.SimpleRequest {
	return &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte(id)}}
}

// charged returns how many payment rows the store holds, and whether id's
// is one of them.
func charged(t *testing.T, db *oncekv.DB, id string) (n int, has bool) {
	t.Helper()
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		b := tx.Bucket(paymentsBucket)
		if b == nil {
			return nil
		}
		has = b.Get([]byte(id)) != nil
		return b.ForEach(func(_, _ []byte) error { n++; return nil })
	}))
	return n, has
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestMain(m *testing.M) {
	oncetest.ChildMain(m, childEnv, func(c *childConfig) string { return c.DB }, serveChild)
}
