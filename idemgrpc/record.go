package idemgrpc

import (
	"encoding/binary"
	"errors"
	"fmt"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// recordVersion is the first byte of a stored answer.
const recordVersion = 1

// ErrDamagedRecord is the error, wrapped with what was wrong, of a stored
// answer that cannot be decoded; the call gets INTERNAL and the record is
// left as it is for an operator.
var ErrDamagedRecord = errors.New("idemgrpc: damaged record")

// answer is what a call's record keeps: the status, the header and
// trailer metadata the handler set, and the response message.
type answer struct {
	status   *spb.Status // nil for OK
	header   metadata.MD
	trailer  metadata.MD
	response []byte // the marshalled response message, for OK
}

// encode lays a out as: version, status (length-prefixed, empty for OK),
// header and trailer (each a count of pairs, each string length-prefixed),
// then the response message to the end.
func (a *answer) encode() ([]byte, error) {
	b := []byte{recordVersion}
	var st []byte
	if a.status != nil {
		var err error
		if st, err = proto.Marshal(a.status); err != nil {
			return nil, fmt.Errorf("idemgrpc: encoding the status: %w", err)
		}
	}
	b = appendBytes(b, st)
	b = appendMD(appendMD(b, a.header), a.trailer)
	return append(b, a.response...), nil
}

func appendBytes(b, v []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

func appendMD(b []byte, md metadata.MD) []byte {
	n := 0
	for _, vs := range md {
		n += len(vs)
	}
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range md {
		for _, v := range vs {
			b = appendBytes(appendBytes(b, []byte(k)), []byte(v))
		}
	}
	return b
}

// decodeAnswer is encode's inverse; its errors wrap ErrDamagedRecord.
func decodeAnswer(b []byte) (*answer, error) {
	d := decoder{b: b}
	if v := d.byte(); d.err == nil && v != recordVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrDamagedRecord, v, recordVersion)
	}
	a := &answer{}
	if st := d.bytes(); len(st) > 0 {
		a.status = &spb.Status{}
		if err := proto.Unmarshal(st, a.status); err != nil {
			return nil, fmt.Errorf("%w: status: %v", ErrDamagedRecord, err)
		}
	}
	a.header, a.trailer = d.md(), d.md()
	if d.err != nil {
		return nil, d.err
	}
	a.response = d.b
	return a, nil
}

// decoder reads encode's fields; the first failure sticks in err.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s cut short", ErrDamagedRecord, what)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.fail("version")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint(what string) uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint("a length")
	if n > uint64(len(d.b)) {
		d.fail("a field")
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) md() metadata.MD {
	n := d.uvarint("a metadata count")
	if n > uint64(len(d.b)) { // every pair takes at least two bytes
		d.fail("metadata")
	}
	if d.err != nil || n == 0 {
		return nil
	}
	md := metadata.MD{}
	for range n {
		k, v := d.bytes(), d.bytes()
		if d.err != nil {
			return nil
		}
		md[string(k)] = append(md[string(k)], string(v))
	}
	return md
}
