package otel

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"strings"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
)

// Baggage members that carry an operation's identity across processes.
const (
	// BaggageKeyHash is the key hash: 32 lowercase hex digits, always set.
	BaggageKeyHash = "oncekv.key_hash"
	// BaggageKey is the key itself, set only with Options.RecordKeys.
	BaggageKey = "oncekv.key"
)

// hashPrefix separates this package's hashes of a key from any other
// hash of the same key (Claim.Key is a SHA-256 of the key too).
const hashPrefix = "oncekv.otel.key\x00"

// operation is one logical operation, named by its idempotency key: what
// every retry of it shares. The zero operation names none.
type operation struct {
	// trace and span are the IDs of the operation's placeholder span
	// context, derived from the key hash; the trace ID is the hash shown.
	trace trace.TraceID
	span  trace.SpanID
	// key is the key itself where it may be recorded, else "".
	key string
}

func (op operation) valid() bool { return op.trace.IsValid() }

// hashString is the key hash as spans and baggage carry it.
func (op operation) hashString() string { return op.trace.String() }

// operationOf returns the operation of key; the zero operation for "".
func (t *Telemetry) operationOf(key string) operation {
	if key == "" {
		return operation{}
	}
	var h hash.Hash
	if len(t.opts.KeySecret) > 0 {
		h = hmac.New(sha256.New, t.opts.KeySecret)
	} else {
		h = sha256.New()
	}
	h.Write([]byte(hashPrefix))
	h.Write([]byte(key))
	var id trace.TraceID
	copy(id[:], h.Sum(nil))
	// An all-zero ID is invalid; a hash is one with probability 2^-128.
	id[15] |= boolByte(!id.IsValid())
	op := operationOfTrace(id)
	if t.opts.RecordKeys && len(key) <= MaxKeyAttribute {
		op.key = key
	}
	return op
}

// operationOfHash returns the operation whose key hash is s, as a peer
// sent it in the baggage without the key; false when s is not one.
func operationOfHash(s string) (operation, bool) {
	var id trace.TraceID
	if len(s) != 32 || s != strings.ToLower(s) {
		return operation{}, false
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil || !id.IsValid() {
		return operation{}, false
	}
	return operationOfTrace(id), true
}

// operationOfTrace returns the operation of trace id: its placeholder's
// span ID is a function of id alone, so that a process that knows only the
// hash (from the baggage) and one that knows the key give the same parent.
func operationOfTrace(id trace.TraceID) operation {
	op := operation{trace: id}
	s := binary.BigEndian.Uint64(id[:8]) ^ binary.BigEndian.Uint64(id[8:])
	binary.BigEndian.PutUint64(op.span[:], max(s, 1))
	return op
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// KeyHash returns the hash spans and baggage carry for key in its place
// (the oncekv.key_hash attribute): 32 lowercase hex digits, the first 16
// bytes of SHA-256 (or HMAC-SHA256 under Options.KeySecret) of a fixed
// prefix and key. It is key's TraceID written out, so a hash found in a
// span names the trace of its key's other retries. "" for "".
func (t *Telemetry) KeyHash(key string) string {
	if key == "" {
		return ""
	}
	return t.operationOf(key).hashString()
}

// TraceID returns the ID of key's operation trace: the trace that a span
// about key joins when its context carries no trace of its own (see
// Start), in every process configured with the same Options.KeySecret.
// Paste it into a tracing UI to see every retry of key. It is the zero
// (invalid) ID for "".
func (t *Telemetry) TraceID(key string) trace.TraceID { return t.operationOf(key).trace }

// placeholder returns the operation's span context: the remote parent of
// the spans that open its trace. sampled is the flag a ParentBased
// sampler follows.
func (op operation) placeholder(sampled bool) trace.SpanContext {
	var flags trace.TraceFlags
	if sampled {
		flags = trace.FlagsSampled
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: op.trace, SpanID: op.span, TraceFlags: flags, Remote: true})
}

// sampled reports whether id's operation trace is recorded: the rule of
// the SDK's TraceIDRatioBased sampler, on Options.SampleRatio.
func (t *Telemetry) sampled(id trace.TraceID) bool {
	switch r := t.opts.SampleRatio; {
	case r >= 1:
		return true
	case r <= 0:
		return false
	default:
		return binary.BigEndian.Uint64(id[8:16])>>1 < uint64(r*(1<<63))
	}
}

// withBaggage returns ctx with op's identity in its baggage, replacing any
// earlier operation's: a request made under it names this operation.
func withBaggage(ctx context.Context, op operation) context.Context {
	b := baggage.FromContext(ctx).DeleteMember(BaggageKey)
	if m, err := baggage.NewMemberRaw(BaggageKeyHash, op.hashString()); err == nil {
		b, _ = b.SetMember(m)
	}
	if op.key != "" {
		// A key that is not valid UTF-8 cannot be a member; its hash is.
		if m, err := baggage.NewMemberRaw(BaggageKey, op.key); err == nil {
			b, _ = b.SetMember(m)
		}
	}
	return baggage.ContextWithBaggage(ctx, b)
}

// operationOfBaggage returns the operation ctx's baggage names: by its key
// when a peer sent it, else by its hash.
func (t *Telemetry) operationOfBaggage(ctx context.Context) operation {
	b := baggage.FromContext(ctx)
	if key := b.Member(BaggageKey).Value(); key != "" {
		return t.operationOf(key)
	}
	op, _ := operationOfHash(b.Member(BaggageKeyHash).Value())
	return op
}
