package watermill

import (
	"encoding/json"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/oncekv/oncekv"
)

// producedVersion is the format version of the stored produced messages.
const producedVersion = 1

// produced is what the mark's response holds: the messages the handler
// returned when it ran, so that a duplicate gets them again (with the
// same UUIDs, for the next consumer to deduplicate).
type produced struct {
	V    int               `json:"v"`
	Msgs []producedMessage `json:"m"`
}

type producedMessage struct {
	UUID     string            `json:"u"`
	Metadata map[string]string `json:"md,omitempty"`
	Payload  []byte            `json:"p"`
}

// encodeProduced returns the response that stores msgs; nil for none.
func encodeProduced(msgs []*message.Message) ([]byte, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	p := produced{V: producedVersion, Msgs: make([]producedMessage, len(msgs))}
	for i, m := range msgs {
		if m == nil {
			return nil, oncekv.Permanent(fmt.Errorf("oncekv: watermill: the handler returned a nil message at %d", i))
		}
		p.Msgs[i] = producedMessage{UUID: m.UUID, Metadata: m.Metadata, Payload: m.Payload}
	}
	return json.Marshal(p)
}

// decodeProduced returns the messages a response stores. Errors:
// ErrBadResponse, permanent.
func decodeProduced(b []byte) ([]*message.Message, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var p produced
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, oncekv.Permanent(fmt.Errorf("%w: %w", ErrBadResponse, err))
	}
	if p.V != producedVersion {
		return nil, oncekv.Permanent(fmt.Errorf("%w: format version %d, want %d", ErrBadResponse, p.V, producedVersion))
	}
	out := make([]*message.Message, len(p.Msgs))
	for i, pm := range p.Msgs {
		m := message.NewMessage(pm.UUID, pm.Payload)
		for k, v := range pm.Metadata {
			m.Metadata.Set(k, v)
		}
		out[i] = m
	}
	return out, nil
}
