package jcs_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/jcs"
)

// The canonical form of RFC 8785's own example: members sorted, numbers
// as ECMAScript writes them, escapes only where a string needs them.
func Example() {
	in := []byte(`{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`)
	out, err := jcs.Canonicalize(in)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(out))
	// Output:
	// {"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}
}

// Two spellings of one value have one fingerprint: the SHA-256 of the
// canonical form, here of {"amount":1200,"currency":"EUR"}, which a
// client in any language can compute (printf '%s' that | sha256sum).
func ExampleFingerprint() {
	a, err := jcs.Fingerprint([]byte(`{"amount": 1200.0, "currency": "EUR"}`))
	if err != nil {
		log.Fatal(err)
	}
	b, err := jcs.Fingerprint([]byte(`{"currency":"\u0045UR","amount":12e2}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(hex.EncodeToString(a))
	fmt.Println(hex.EncodeToString(b))
	// Output:
	// cc4d9f720c2753fb36eb4c6fc4d5b44d9ea4845d71cf1fbfe2cd4da669f98555
	// cc4d9f720c2753fb36eb4c6fc4d5b44d9ea4845d71cf1fbfe2cd4da669f98555
}

// Input with no canonical form says what is wrong and where.
func ExampleError() {
	_, err := jcs.Canonicalize([]byte(`{"items": [{"sku": "A-1", "sku": "A-2"}]}`))
	var e *jcs.Error
	if errors.As(err, &e) {
		fmt.Println(errors.Is(err, jcs.ErrDuplicateName), e.Path, e.Offset)
	}
	fmt.Println(err)
	// Output:
	// true $['items'][0]['sku'] 26
	// oncekv: jcs: duplicate member name at $['items'][0]['sku'] (offset 26): the name "sku" again (first at offset 12)
}

// A consumer whose producer re-encodes its messages: the second delivery
// has its members in another order and 1.0 for 1, and is a duplicate; a
// message with another amount under the same key is key reuse.
func ExampleRequest() {
	dir, err := os.MkdirTemp("", "jcs-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := oncekv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	deliveries := []string{
		`{"order":"o-17","amount":1,"currency":"EUR"}`,
		`{"currency":"EUR", "amount":1.0, "order":"o-17"}`,
		`{"order":"o-17","amount":2,"currency":"EUR"}`,
	}
	for _, body := range deliveries {
		req, err := jcs.Request("charge", "evt-9f2c", []byte(body))
		if err != nil {
			log.Fatal(err) // not I-JSON: see jcs.Error
		}
		res, err := db.Apply(context.Background(), req, func(tx *oncekv.Tx) ([]byte, error) {
			return []byte("charged"), nil
		})
		switch {
		case errors.Is(err, oncekv.ErrKeyReuse):
			fmt.Println("key reuse: another value under this key")
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Println(string(res.Response), "duplicate:", res.Duplicate)
		}
	}
	// Output:
	// charged duplicate: false
	// charged duplicate: true
	// key reuse: another value under this key
}
