package idemgrpc

import (
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// captureStream is the handler's grpc.ServerTransportStream: it passes
// every header and trailer to the call's stream and keeps a copy, stored
// with the answer and replayed with it.
type captureStream struct {
	inner grpc.ServerTransportStream
	mu    sync.Mutex
	hdr   metadata.MD
	trl   metadata.MD
}

func (c *captureStream) Method() string {
	if c.inner == nil {
		return ""
	}
	return c.inner.Method()
}

func (c *captureStream) SetHeader(md metadata.MD) error {
	c.keep(&c.hdr, md)
	if c.inner == nil {
		return nil
	}
	return c.inner.SetHeader(md)
}

func (c *captureStream) SendHeader(md metadata.MD) error {
	c.keep(&c.hdr, md)
	if c.inner == nil {
		return nil
	}
	return c.inner.SendHeader(md)
}

func (c *captureStream) SetTrailer(md metadata.MD) error {
	c.keep(&c.trl, md)
	if c.inner == nil {
		return nil
	}
	return c.inner.SetTrailer(md)
}

func (c *captureStream) keep(into *metadata.MD, md metadata.MD) {
	c.mu.Lock()
	defer c.mu.Unlock()
	*into = metadata.Join(*into, md)
}

func (c *captureStream) header() metadata.MD {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hdr
}

func (c *captureStream) trailer() metadata.MD {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trl
}
