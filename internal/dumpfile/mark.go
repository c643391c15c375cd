package dumpfile

import (
	"encoding/hex"
	"fmt"
	"time"

	"github.com/oncekv/oncekv"
)

// StoredFingerprint is how much of MarkInfo.Fingerprint a mark keeps; the
// rest is zero, and not written.
const StoredFingerprint = 16

// Mark is a mark as a dump line holds it, and as the oncekv command prints
// one with -json.
type Mark struct {
	Type        string     `json:"type,omitempty"` // TypeMark in a dump
	Handler     Text       `json:"handler"`
	Key         Text       `json:"key"`
	State       string     `json:"state"`
	FirstSeen   time.Time  `json:"first_seen"`
	Window      time.Time  `json:"window"`
	Fingerprint string     `json:"fingerprint"` // hex, the first 16 bytes of the SHA-256
	Response    *Text      `json:"response,omitempty"`
	Error       string     `json:"error,omitempty"`
	LeaseUntil  *time.Time `json:"lease_until,omitempty"`
	Token       uint64     `json:"token"`
	ClaimKey    string     `json:"claim_key"`
	Released    bool       `json:"released,omitempty"`
	Orphaned    bool       `json:"orphaned,omitempty"`
}

// MarkOf is m as a Mark, its Type empty.
func MarkOf(m oncekv.MarkInfo) Mark {
	j := Mark{
		Handler:     Text(m.Handler),
		Key:         Text(m.Key),
		State:       m.State.String(),
		FirstSeen:   m.FirstSeen.UTC(),
		Window:      m.Window.UTC(),
		Fingerprint: hex.EncodeToString(m.Fingerprint[:StoredFingerprint]),
		Response:    textPtr(m.Response),
		Error:       m.Error,
		Token:       m.Token,
		ClaimKey:    m.ClaimKey,
		Released:    m.Released,
		Orphaned:    m.Orphaned,
	}
	if !m.LeaseUntil.IsZero() {
		t := m.LeaseUntil.UTC()
		j.LeaseUntil = &t
	}
	return j
}

// States maps the names MarkState.String prints back to the states.
var States = map[string]oncekv.MarkState{
	oncekv.MarkInProgress.String(): oncekv.MarkInProgress,
	oncekv.MarkDone.String():       oncekv.MarkDone,
	oncekv.MarkFailed.String():     oncekv.MarkFailed,
	oncekv.MarkParked.String():     oncekv.MarkParked,
}

// MarkInfo is the inverse of MarkOf. Errors match ErrInvalidLine: an
// unknown state, a fingerprint that is not 16 or 32 hex bytes.
func (j *Mark) MarkInfo() (oncekv.MarkInfo, error) {
	m := oncekv.MarkInfo{
		Handler:   string(j.Handler),
		Key:       string(j.Key),
		State:     States[j.State],
		FirstSeen: j.FirstSeen,
		Window:    j.Window,
		Error:     j.Error,
		Token:     j.Token,
	}
	if m.State == 0 {
		return m, fmt.Errorf("%w: mark %q/%q: unknown state %q", ErrInvalidLine, j.Handler, j.Key, j.State)
	}
	// A dump of a build before format 3 has the whole SHA-256: the store
	// keeps its first 16 bytes, as it does of its own marks.
	fp, err := hex.DecodeString(j.Fingerprint)
	if err != nil || (len(fp) != StoredFingerprint && len(fp) != len(m.Fingerprint)) {
		return m, fmt.Errorf("%w: mark %q/%q: fingerprint %q is not %d or %d hex bytes",
			ErrInvalidLine, j.Handler, j.Key, j.Fingerprint, StoredFingerprint, len(m.Fingerprint))
	}
	copy(m.Fingerprint[:], fp)
	if j.Response != nil {
		m.Response = append([]byte{}, *j.Response...)
	}
	if j.LeaseUntil != nil {
		m.LeaseUntil = *j.LeaseUntil
	}
	return m, nil
}
