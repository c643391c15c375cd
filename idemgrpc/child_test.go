package idemgrpc_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemgrpc"
)

const childEnv = "IDEMGRPC_CHILD"

// childConfig is a server process's: its store, and whether its handler
// hangs (to be killed in it).
type childConfig struct {
	DB   string
	Hang bool
}

// serveChild serves the payments service behind the interceptor on a
// loopback port it prints ("ADDR host:port"); a hanging handler prints
// "ENTERED key" and waits to be killed.
func serveChild(ctx context.Context, db *oncekv.DB, c *childConfig) error {
	svc := &payments{}
	if c.Hang {
		svc.entered, svc.block = make(chan string, 1), make(chan struct{})
		go func() {
			for k := range svc.entered {
				fmt.Println("ENTERED", k)
			}
		}()
	}
	s, err := idemgrpc.New(db, &idemgrpc.Options{Scope: scopeFromMetadata, Lease: time.Second})
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(s.UnaryServerInterceptor()))
	testgrpc.RegisterTestServiceServer(srv, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println("ADDR", lis.Addr())
	go func() { <-ctx.Done(); srv.GracefulStop() }()
	return srv.Serve(lis)
}
