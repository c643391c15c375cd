package idemgrpc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/idemcore"
)

// Server is the idempotency interceptor over one store. It is safe for
// concurrent use.
type Server struct {
	proto       idemcore.Protocol
	opts        Options
	methods     map[string]bool // nil: every unary method
	fingerprint []string        // lower-case metadata keys, in Options order
	types       sync.Map        // full method name -> protoreflect.MessageType of its response
}

// New returns the interceptor storing its records in db. It fails with
// ErrInvalidOptions when db is nil or opts is invalid (Scope is required).
func New(db *oncekv.DB, opts *Options) (*Server, error) {
	o, err := opts.withDefaults()
	if db == nil {
		err = errors.Join(fmt.Errorf("%w: db is nil", ErrInvalidOptions), err)
	}
	if err != nil {
		return nil, err
	}
	store := idemcore.Embedded(db)
	if o.Now == nil {
		o.Now = store.Now
	}
	s := &Server{
		proto: idemcore.Protocol{Store: store, Lease: o.Lease, Heartbeat: o.Heartbeat, Now: o.Now, Logger: o.Logger},
		opts:  o,
	}
	if len(o.Methods) > 0 {
		s.methods = map[string]bool{}
		for _, m := range o.Methods {
			s.methods[m] = true
		}
	}
	for _, k := range o.FingerprintMetadata {
		s.fingerprint = append(s.fingerprint, strings.ToLower(k))
	}
	return s, nil
}

// UnaryServerInterceptor returns the interceptor, for
// grpc.UnaryInterceptor or grpc.ChainUnaryInterceptor (after the
// interceptor that authenticates the caller, which Options.Scope reads).
// It panics if s was not made by New.
func (s *Server) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	if s == nil || s.proto.Store == nil {
		panic("idemgrpc: UnaryServerInterceptor on a Server not made by New")
	}
	return s.intercept
}

func (s *Server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if s.methods != nil && !s.methods[info.FullMethod] {
		return handler(ctx, req)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	key, present, err := parseKey(md.Get(KeyMetadata))
	switch {
	case err != nil:
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case !present && s.opts.RequireKey:
		return nil, status.Errorf(codes.InvalidArgument, "idemgrpc: %s needs an %s metadata entry", info.FullMethod, KeyMetadata)
	case !present:
		return handler(ctx, req)
	}
	scope, err := s.opts.Scope(ctx)
	if err != nil || scope == "" {
		return nil, status.Error(codes.Unauthenticated, "idemgrpc: the caller could not be identified, and keys are kept per caller")
	}
	fp, err := s.fingerprintOf(info.FullMethod, md, req)
	if err != nil {
		return nil, err
	}
	replay, run, err := s.proto.Begin(ctx, oncekv.Request{Handler: s.opts.Handler, Key: idemcore.StoreKey(scope, key), Payload: fp})
	switch {
	case err != nil:
		return nil, s.refuse(ctx, err)
	case run == nil && replay.ResponseExpired:
		// A tombstone: the call was applied, its answer is gone.
		_ = grpc.SetTrailer(ctx, metadata.Pairs(ReplayedTrailer, "true"))
		return nil, status.Error(codes.AlreadyExists, "idemgrpc: a call with this key was applied; its stored answer has expired")
	case run == nil:
		return s.replay(ctx, info.FullMethod, replay.Response)
	}
	return s.run(ctx, req, info, handler, run)
}

// parseKey returns the call's key: one metadata value of printable ASCII,
// 1 to idemhttp.MaxKeyLen bytes, as the HTTP header's.
func parseKey(values []string) (key string, present bool, err error) {
	switch {
	case len(values) == 0:
		return "", false, nil
	case len(values) > 1:
		return "", true, fmt.Errorf("idemgrpc: %s is given %d times", KeyMetadata, len(values))
	case values[0] == "" || len(values[0]) > idemhttp.MaxKeyLen:
		return "", true, fmt.Errorf("idemgrpc: %s is %d bytes, want 1 to %d", KeyMetadata, len(values[0]), idemhttp.MaxKeyLen)
	}
	for i := 0; i < len(values[0]); i++ {
		if c := values[0][i]; c < 0x20 || c > 0x7e {
			return "", true, fmt.Errorf("idemgrpc: %s has byte %#x at %d, which is not printable ASCII", KeyMetadata, c, i)
		}
	}
	return values[0], true, nil
}

// fingerprintOf hashes what makes two calls the same call: the method,
// the chosen metadata and the request message, marshalled
// deterministically.
func (s *Server) fingerprintOf(method string, md metadata.MD, req any) ([]byte, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return nil, status.Errorf(codes.Internal, "idemgrpc: the request of %s is a %T, not a protocol buffer message", method, req)
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "idemgrpc: the request of %s cannot be marshalled: %v", method, err)
	}
	f := idemcore.NewFingerprint()
	f.Field(method)
	for _, k := range s.fingerprint {
		vs := md.Get(k)
		f.Count(len(vs))
		for _, v := range vs {
			f.Field(v)
		}
	}
	f.Body(body)
	return f.Sum(), nil
}

// refuse answers a call whose key could not be claimed.
func (s *Server) refuse(ctx context.Context, err error) error {
	r := s.proto.Refuse(ctx, err)
	switch r.Kind {
	case idemcore.InProgress:
		ms := max(r.RetryAfter.Milliseconds(), 1)
		_ = grpc.SetTrailer(ctx, metadata.Pairs(PushbackTrailer, fmt.Sprint(ms)))
		return status.Errorf(codes.Aborted, "idemgrpc: a call with this key is still running; retry in %d ms", ms)
	case idemcore.KeyReuse:
		return status.Error(codes.FailedPrecondition, "idemgrpc: this key was first used with another request (method, metadata or message)")
	case idemcore.Unavailable:
		return status.Error(codes.Unavailable, "idemgrpc: the call could not be recorded; retry it")
	}
	s.opts.Logger.Error("idemgrpc: claim failed", "err", err)
	return status.Error(codes.Internal, "idemgrpc: the call could not be recorded; retry it")
}

// replay answers a call from its key's record, without the handler.
func (s *Server) replay(ctx context.Context, method string, record []byte) (any, error) {
	a, err := decodeAnswer(record)
	if err != nil {
		s.opts.Logger.Error("idemgrpc: stored answer unreadable", "method", method, "err", err)
		return nil, status.Errorf(codes.Internal, "idemgrpc: the stored answer of this key cannot be read: %v", err)
	}
	if len(a.header) > 0 {
		_ = grpc.SetHeader(ctx, a.header)
	}
	_ = grpc.SetTrailer(ctx, metadata.Join(a.trailer, metadata.Pairs(ReplayedTrailer, "true")))
	if a.status != nil {
		return nil, status.ErrorProto(a.status)
	}
	t, err := s.responseType(method)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	resp := t.New().Interface()
	if err := proto.Unmarshal(a.response, resp); err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: the stored response of this key cannot be read: %v", err)
	}
	return resp, nil
}

// run runs the handler for a claimed key and stores or releases its
// answer.
func (s *Server) run(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler, run *idemcore.Run) (resp any, err error) {
	capture := &captureStream{inner: grpc.ServerTransportStreamFromContext(ctx)}
	settled := false
	defer func() {
		// Reached by a panic in the handler too: the key must not stay
		// held until its lease ends.
		run.Close()
		if !settled {
			run.Release("the handler did not return")
		}
	}()
	resp, err = handler(grpc.NewContextWithServerTransportStream(run.Context(), capture), req)
	run.Close()
	err = s.finish(ctx, info.FullMethod, run, capture, resp, err)
	settled = true
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// finish stores the handler's answer, or releases or forgets the key, and
// returns the error to answer with.
func (s *Server) finish(ctx context.Context, method string, run *idemcore.Run, capture *captureStream, resp any, err error) error {
	st := status.Convert(err)
	switch {
	case ctx.Err() != nil:
		run.Release("the caller went away")
		return err
	case !run.Storing():
		run.Forget()
		return err
	case !s.opts.Store(st.Code()):
		run.Release("status " + st.Code().String() + " is not stored")
		return err
	}
	a := &answer{header: capture.header(), trailer: capture.trailer()}
	if err != nil {
		a.status = st.Proto()
	} else {
		m, ok := resp.(proto.Message)
		if !ok {
			run.Release("the response is not a protocol buffer message")
			return status.Errorf(codes.Internal, "idemgrpc: the response of %s is a %T, not a protocol buffer message", method, resp)
		}
		if a.response, err = proto.Marshal(m); err != nil {
			run.Release("the response cannot be marshalled")
			return status.Errorf(codes.Internal, "idemgrpc: the response of %s cannot be marshalled: %v", method, err)
		}
		s.types.Store(method, m.ProtoReflect().Type())
	}
	record, encErr := a.encode()
	switch {
	case encErr != nil:
		run.Release(encErr.Error())
		return status.Error(codes.Internal, encErr.Error())
	case len(record) > s.opts.MaxRecordBytes:
		run.Release("the answer is over MaxRecordBytes")
		return err
	}
	if _, cerr := run.Complete(record); cerr != nil {
		if errors.Is(cerr, oncekv.ErrFenced) {
			return status.Error(codes.Aborted, "idemgrpc: the call lost its key to a takeover; its answer was not kept")
		}
		s.opts.Logger.Error("idemgrpc: storing the answer failed", "method", method, "err", cerr)
		return status.Error(codes.Internal, "idemgrpc: the call's answer could not be recorded; retry it")
	}
	return err
}

// responseType returns the response message type of method: the one its
// handler returned in this process, or else the one the protocol buffer
// registry names for the method's output.
func (s *Server) responseType(method string) (protoreflect.MessageType, error) {
	if t, ok := s.types.Load(method); ok {
		return t.(protoreflect.MessageType), nil
	}
	t, err := registeredResponse(method)
	if err != nil {
		return nil, fmt.Errorf("idemgrpc: cannot replay %s: %w", method, err)
	}
	s.types.Store(method, t)
	return t, nil
}
