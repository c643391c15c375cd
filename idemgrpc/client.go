package idemgrpc

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// NewKey returns a fresh idempotency key: 128 random bits in hex.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b[:])
}

// WithKey returns ctx with key as the idempotency key of the calls made
// with it. Call it once per logical call, before any retry loop.
func WithKey(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, KeyMetadata, key)
}

// WithNewKey is WithKey with NewKey.
func WithNewKey(ctx context.Context) context.Context { return WithKey(ctx, NewKey()) }

// OutgoingKey returns the idempotency key ctx's calls carry, if any.
func OutgoingKey(ctx context.Context) (key string, ok bool) {
	md, _ := metadata.FromOutgoingContext(ctx)
	if vs := md.Get(KeyMetadata); len(vs) > 0 {
		return vs[len(vs)-1], true
	}
	return "", false
}

// UnaryClientInterceptor returns a client interceptor that gives a call of
// one of methods (full names; none means every method) without a key a
// fresh one. grpc-go's transparent and policy retries resend the same
// metadata, so every attempt of the call carries the same key; a caller's
// own retry loop keeps it only if the key is minted before the loop, with
// WithNewKey.
func UnaryClientInterceptor(methods ...string) grpc.UnaryClientInterceptor {
	covered := map[string]bool{}
	for _, m := range methods {
		covered[m] = true
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if len(covered) == 0 || covered[method] {
			if _, ok := OutgoingKey(ctx); !ok {
				ctx = WithNewKey(ctx)
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}
