package jcs_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/oncekv/oncekv/jcs"
)

// orderBody is a typical 1 KiB request body: an order as a client
// library writes it, indented, members in the client's order, a few
// escapes and decimals.
var orderBody = []byte(`{
  "order_id": "ord_8e03978e40d543e8bc936894a57f9324",
  "customer": {
    "id": "cus_1042",
    "name": "Jos\u00e9 Mar\u00eda Garc\u00eda",
    "email": "jose.garcia@example.com",
    "address": {"street": "Calle de Alcal\u00e1 42", "city": "Madrid", "postcode": "28014", "country": "ES"}
  },
  "currency": "EUR",
  "items": [
    {"sku": "SKU-0001", "title": "Espresso beans, 1 kg", "quantity": 2, "unit_price": 18.50, "tax_rate": 0.10},
    {"sku": "SKU-0417", "title": "Burr grinder \"Pro\"", "quantity": 1, "unit_price": 129.00, "tax_rate": 0.21},
    {"sku": "SKU-0093", "title": "Paper filters (100)", "quantity": 3, "unit_price": 4.25, "tax_rate": 0.21},
    {"sku": "SKU-1200", "title": "Gift card", "quantity": 1, "unit_price": 50, "tax_rate": 0}
  ],
  "discount": {"code": "SPRING10", "percent": 10},
  "shipping": {"method": "express", "price": 7.9, "eta_days": 2},
  "total": 225.43,
  "notes": "Leave at the door / ring twice",
  "metadata": {"source": "mobile-app", "app_version": "5.12.0", "ab_test": null, "gift": false},
  "created_at": "2025-03-14T09:26:53.589Z"
}
`)

// BenchmarkCanonicalize: canonicalising orderBody, about 1 KiB.
func BenchmarkCanonicalize(b *testing.B) {
	benchOrder(b, func() error {
		_, err := jcs.Canonicalize(orderBody)
		return err
	})
}

// BenchmarkFingerprint: canonicalising and hashing orderBody.
func BenchmarkFingerprint(b *testing.B) {
	benchOrder(b, func() error {
		_, err := jcs.Fingerprint(orderBody)
		return err
	})
}

// BenchmarkEncodingJSONCompact is a yardstick for the two above:
// encoding/json's Compact of orderBody, a scan that sorts nothing and
// rewrites no number or string.
func BenchmarkEncodingJSONCompact(b *testing.B) {
	var buf bytes.Buffer
	benchOrder(b, func() error {
		buf.Reset()
		return json.Compact(&buf, orderBody)
	})
}

// BenchmarkEncodingJSONRoundTrip is the other yardstick: orderBody
// decoded into an any and encoded again, the usual way to get sorted
// keys with encoding/json (not RFC 8785: it sorts by UTF-8 bytes and
// escapes <, > and &).
func BenchmarkEncodingJSONRoundTrip(b *testing.B) {
	benchOrder(b, func() error {
		var v any
		if err := json.Unmarshal(orderBody, &v); err != nil {
			return err
		}
		_, err := json.Marshal(v)
		return err
	})
}

// BenchmarkCanonicalizeNested and BenchmarkCanonicalizeFlat canonicalise
// the same MaxDepth (10000) objects of two members in reverse order, 120
// KB, nested inside one another in the first and side by side in an
// array in the second: side by side in one run, their ratio shows that
// the depth costs stack, not a copy of each object's contents for every
// level above it.
func BenchmarkCanonicalizeNested(b *testing.B) {
	benchShape(b, strings.Repeat(`{"b":1,"a":`, jcs.MaxDepth)+"0"+strings.Repeat("}", jcs.MaxDepth))
}

func BenchmarkCanonicalizeFlat(b *testing.B) {
	benchShape(b, "["+strings.Repeat(`{"b":1,"a":0},`, jcs.MaxDepth-1)+`{"b":1,"a":0}]`)
}

func benchShape(b *testing.B, text string) {
	data := []byte(text)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := jcs.Canonicalize(data); err != nil {
			b.Fatal(err)
		}
	}
}

// benchOrder runs op over orderBody, reporting its bytes per second.
func benchOrder(b *testing.B, op func() error) {
	b.SetBytes(int64(len(orderBody)))
	b.ReportAllocs()
	for b.Loop() {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
}
