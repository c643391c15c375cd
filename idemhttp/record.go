package idemhttp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// A record is a stored response, the Response of the key's oncekv mark:
//
//	[0]     format version (recordVersion)
//	[1]     flags (flagBodyOmitted)
//	[2:4]   status, big-endian
//	[4:8]   body length n, big-endian
//	[8:8+n] body
//	then    one entry per header value: uvarint name length, name,
//	        uvarint value length, value
//
// The body comes before the headers so the recorder can append the body
// into the record as the handler writes it, and add the headers once they
// are final: the response is held once, not copied into a record at the end.
const (
	recordVersion   = 1
	recordPrefix    = 8
	flagBodyOmitted = 1
)

// errBadRecord: a stored record that does not decode. It is never a panic:
// the replay answers 500.
var errBadRecord = errors.New("oncekv: idemhttp: stored response does not decode")

// header is one stored header value.
type header struct{ name, value string }

// appendHeaders appends the record's header section.
func appendHeaders(b []byte, hs []header) []byte {
	for _, h := range hs {
		b = binary.AppendUvarint(b, uint64(len(h.name)))
		b = append(b, h.name...)
		b = binary.AppendUvarint(b, uint64(len(h.value)))
		b = append(b, h.value...)
	}
	return b
}

// setPrefix fills the record's fixed prefix, reserved when the record was
// started.
func setPrefix(b []byte, status int, bodyLen int, omitted bool) {
	b[0] = recordVersion
	b[1] = 0
	if omitted {
		b[1] = flagBodyOmitted
	}
	binary.BigEndian.PutUint16(b[2:4], uint16(status))
	binary.BigEndian.PutUint32(b[4:8], uint32(bodyLen))
}

// decoded is a record taken apart; body aliases the record.
type decoded struct {
	status  int
	omitted bool
	body    []byte
	headers []header
}

// decodeRecord validates and takes apart a stored record.
func decodeRecord(b []byte) (decoded, error) {
	var d decoded
	if len(b) < recordPrefix {
		return d, fmt.Errorf("%w: %d bytes, shorter than its header", errBadRecord, len(b))
	}
	if b[0] != recordVersion {
		return d, fmt.Errorf("%w: format version %d", errBadRecord, b[0])
	}
	if b[1]&^flagBodyOmitted != 0 {
		return d, fmt.Errorf("%w: unknown flags %#x", errBadRecord, b[1])
	}
	d.omitted = b[1]&flagBodyOmitted != 0
	d.status = int(binary.BigEndian.Uint16(b[2:4]))
	if d.status < 200 || d.status > 999 {
		return d, fmt.Errorf("%w: status %d", errBadRecord, d.status)
	}
	n := uint64(binary.BigEndian.Uint32(b[4:8]))
	rest := b[recordPrefix:]
	if n > uint64(len(rest)) {
		return d, fmt.Errorf("%w: body of %d bytes in %d", errBadRecord, n, len(rest))
	}
	d.body, rest = rest[:n:n], rest[n:]
	for len(rest) > 0 {
		var name, value string
		var err error
		if name, rest, err = field(rest); err != nil {
			return d, err
		}
		if value, rest, err = field(rest); err != nil {
			return d, err
		}
		if !validToken(name) || strings.ContainsAny(value, "\r\n\x00") {
			return d, fmt.Errorf("%w: header %q", errBadRecord, name)
		}
		d.headers = append(d.headers, header{name, value})
	}
	return d, nil
}

// field reads one length-prefixed string.
func field(b []byte) (string, []byte, error) {
	n, k := binary.Uvarint(b)
	switch {
	case k <= 0 || n > uint64(len(b)-k):
		return "", nil, fmt.Errorf("%w: truncated header section", errBadRecord)
	case k != len(binary.AppendUvarint(nil, n)):
		// Only the shortest encoding is written; another one is damage.
		return "", nil, fmt.Errorf("%w: overlong length in header section", errBadRecord)
	}
	b = b[k:]
	return string(b[:n]), b[n:], nil
}

// replayRecord answers with a stored response.
func (m *Middleware) replayRecord(w http.ResponseWriter, record []byte, firstSeen time.Time) {
	d, err := decodeRecord(record)
	if err != nil {
		m.opts.Logger.Error("idemhttp: replay failed", "err", err)
		writeProblem(w, ProblemStoreFailed, http.StatusInternalServerError, "the stored response could not be read")
		return
	}
	h := w.Header()
	for _, sh := range d.headers {
		h.Del(sh.name) // what an outer handler set gives way to the record
	}
	for _, sh := range d.headers {
		h.Add(sh.name, sh.value)
	}
	h.Set("Idempotent-Replayed", "true")
	m.setKeyExpires(h, firstSeen)
	if d.omitted {
		h.Set("Idempotent-Replay-Body-Omitted", "true")
	}
	w.WriteHeader(d.status)
	_, _ = w.Write(d.body) // a client gone mid-replay has nothing to learn
}
