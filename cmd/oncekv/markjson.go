package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/oncekv/oncekv"
)

// text is bytes that print as a JSON string when they are UTF-8, and as
// {"base64": "..."} when they are not, so that a dump stays readable and
// still round-trips any bytes (encoding/json would replace invalid UTF-8).
type text []byte

type base64Text struct {
	B []byte `json:"base64"`
}

// MarshalJSON implements json.Marshaler.
func (t text) MarshalJSON() ([]byte, error) {
	if utf8.Valid(t) {
		return json.Marshal(string(t))
	}
	return json.Marshal(base64Text{t})
}

// UnmarshalJSON implements json.Unmarshaler.
func (t *text) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*t = text(s)
		return nil
	}
	var o base64Text
	if err := json.Unmarshal(b, &o); err != nil || o.B == nil {
		return fmt.Errorf("oncekv: want a string or {\"base64\": ...}, got %.40s", b)
	}
	*t = o.B
	return nil
}

// printable renders bytes for a person: quoted when they are printable
// UTF-8, else as hex.
func printable(b []byte) string {
	if !utf8.Valid(b) {
		return "hex:" + hex.EncodeToString(b)
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) && !unicode.IsSpace(r) {
			return "hex:" + hex.EncodeToString(b)
		}
	}
	return strconv.Quote(string(b))
}

// storedFingerprint is how much of MarkInfo.Fingerprint a mark keeps; the
// rest is zero, and not printed.
const storedFingerprint = 16

// markJSON is a mark as the read commands print it and dump writes it.
type markJSON struct {
	Type        string     `json:"type,omitempty"` // "mark" in a dump
	Handler     text       `json:"handler"`
	Key         text       `json:"key"`
	State       string     `json:"state"`
	FirstSeen   time.Time  `json:"first_seen"`
	Window      time.Time  `json:"window"`
	Fingerprint string     `json:"fingerprint"` // hex, the first 16 bytes of the SHA-256
	Response    *text      `json:"response,omitempty"`
	Error       string     `json:"error,omitempty"`
	LeaseUntil  *time.Time `json:"lease_until,omitempty"`
	Token       uint64     `json:"token"`
	ClaimKey    string     `json:"claim_key"`
	Released    bool       `json:"released,omitempty"`
	Orphaned    bool       `json:"orphaned,omitempty"`
}

func toMarkJSON(m oncekv.MarkInfo) markJSON {
	j := markJSON{
		Handler:     text(m.Handler),
		Key:         text(m.Key),
		State:       m.State.String(),
		FirstSeen:   m.FirstSeen.UTC(),
		Window:      m.Window.UTC(),
		Fingerprint: hex.EncodeToString(m.Fingerprint[:storedFingerprint]),
		Error:       m.Error,
		Token:       m.Token,
		ClaimKey:    m.ClaimKey,
		Released:    m.Released,
		Orphaned:    m.Orphaned,
	}
	if m.Response != nil {
		r := text(m.Response)
		j.Response = &r
	}
	if !m.LeaseUntil.IsZero() {
		t := m.LeaseUntil.UTC()
		j.LeaseUntil = &t
	}
	return j
}

// states maps the names State prints back to states.
var states = map[string]oncekv.MarkState{
	oncekv.MarkInProgress.String(): oncekv.MarkInProgress,
	oncekv.MarkDone.String():       oncekv.MarkDone,
	oncekv.MarkFailed.String():     oncekv.MarkFailed,
}

// markInfo is the inverse of toMarkJSON, for load.
func (j *markJSON) markInfo() (oncekv.MarkInfo, error) {
	m := oncekv.MarkInfo{
		Handler:   string(j.Handler),
		Key:       string(j.Key),
		State:     states[j.State],
		FirstSeen: j.FirstSeen,
		Window:    j.Window,
		Error:     j.Error,
		Token:     j.Token,
	}
	if m.State == 0 {
		return m, fmt.Errorf("oncekv: mark %q/%q: unknown state %q", j.Handler, j.Key, j.State)
	}
	// A dump of a build before format 3 has the whole SHA-256: the store
	// keeps its first 16 bytes, as it does of its own marks.
	fp, err := hex.DecodeString(j.Fingerprint)
	if err != nil || (len(fp) != storedFingerprint && len(fp) != len(m.Fingerprint)) {
		return m, fmt.Errorf("oncekv: mark %q/%q: fingerprint %q is not %d or %d hex bytes",
			j.Handler, j.Key, j.Fingerprint, storedFingerprint, len(m.Fingerprint))
	}
	copy(m.Fingerprint[:], fp)
	if j.Response != nil {
		m.Response = append([]byte{}, *j.Response...)
	}
	return m, nil
}
