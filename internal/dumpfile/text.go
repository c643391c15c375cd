package dumpfile

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Text is bytes that encode as a JSON string when they are UTF-8, and as
// {"base64": "..."} when they are not: encoding/json would replace invalid
// UTF-8, and a dump must give back every byte.
type Text []byte

type base64Text struct {
	B []byte `json:"base64"`
}

// MarshalJSON implements json.Marshaler.
func (t Text) MarshalJSON() ([]byte, error) {
	if utf8.Valid(t) {
		return json.Marshal(string(t))
	}
	return json.Marshal(base64Text{t})
}

// UnmarshalJSON implements json.Unmarshaler.
func (t *Text) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*t = Text(s)
		return nil
	}
	var o base64Text
	if err := json.Unmarshal(b, &o); err != nil || o.B == nil {
		return fmt.Errorf("want a string or {\"base64\": ...}, got %.40s", b)
	}
	*t = o.B
	return nil
}

// textPtr returns a pointer to a copy of b as Text, nil for nil.
func textPtr(b []byte) *Text {
	if b == nil {
		return nil
	}
	t := Text(b)
	return &t
}
