package idemgrpc_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemgrpc"
)

// A server with the interceptor behind its authentication, and a client
// that mints one key per logical call: the caller's retry after a lost
// answer gets the stored response, and the handler ran once.
func Example() {
	dir, _ := os.MkdirTemp("", "idemgrpc")
	defer os.RemoveAll(dir)
	db, err := oncekv.Open(filepath.Join(dir, "server.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	idem, err := idemgrpc.New(db, &idemgrpc.Options{
		// The caller as the authentication interceptor before this one
		// verified it; here, a metadata entry.
		Scope: func(ctx context.Context) (string, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			if u := md.Get("x-user"); len(u) == 1 {
				return u[0], nil
			}
			return "", fmt.Errorf("unauthenticated")
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	svc := &payments{}
	srv := grpc.NewServer(grpc.UnaryInterceptor(idem.UnaryServerInterceptor()))
	testgrpc.RegisterTestServiceServer(srv, svc)
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, err := grpc.NewClient("passthrough:///payments",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)

	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice")
	ctx = idemgrpc.WithNewKey(ctx) // one key for the logical call, before any retry
	req := &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte("order-7")}}
	for attempt := 1; attempt <= 2; attempt++ {
		var trailer metadata.MD
		resp, err := client.UnaryCall(ctx, req, grpc.Trailer(&trailer))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("attempt %d: %s (replayed: %v)\n", attempt, resp.GetPayload().GetBody(), trailer.Get(idemgrpc.ReplayedTrailer))
	}
	fmt.Println("handler runs:", svc.runs.Load())
	// Output:
	// attempt 1: receipt order-7 #1 (replayed: [])
	// attempt 2: receipt order-7 #1 (replayed: [true])
	// handler runs: 1
}
