package idemhttp_test

import (
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"slices"
	"time"

	"github.com/oncekv/oncekv/idemhttp"
)

// The OpenAPI fragment merged into an API's document (openAPIGuide, a code
// block of docs/http.md): the covered operation references the
// Idempotency-Key parameter and the error answers, and its stored answer
// lists the replay and expiry headers.
func ExampleMiddleware_OpenAPI() {
	db, done := exampleDB()
	defer done()
	opts := &idemhttp.Options{Scope: func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }}
	opts.RequireKey, opts.Lease = true, time.Minute // both show in the fragment
	mw, err := idemhttp.New(db, opts)
	if err != nil {
		log.Fatal(err)
	}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info":    map[string]any{"title": "payments", "version": "1"},
		"paths": map[string]any{"/payments": map[string]any{"post": map[string]any{
			"responses": map[string]any{"201": map[string]any{"description": "the payment"}},
		}}},
	}
	if err := openAPIGuide(mw, doc, doc["paths"].(map[string]any)["/payments"].(map[string]any)["post"].(map[string]any)); err != nil {
		log.Fatal(err)
	}

	components := doc["components"].(map[string]any)
	key := components["parameters"].(map[string]any)[idemhttp.OpenAPIKeyParameter].(map[string]any)
	fmt.Println(key["name"], "in", key["in"], "required:", key["required"])
	retry := components["headers"].(map[string]any)[idemhttp.OpenAPIRetryAfterHeader].(map[string]any)["schema"].(map[string]any)
	fmt.Println("Retry-After at most", retry["maximum"], "s")
	var responses []string
	for name := range components["responses"].(map[string]any) {
		responses = append(responses, name)
	}
	slices.Sort(responses)
	fmt.Println(responses)
	// Output:
	// Idempotency-Key in header required: true
	// Retry-After at most 60 s
	// [IdempotencyBadRequest IdempotencyBodyTooLarge IdempotencyInProgress IdempotencyKeyReuse IdempotencyResponseGone IdempotencyStoreFailed IdempotencyUnavailable IdempotencyUnidentified]
}

// openAPIGuide is a code block of docs/http.md, verbatim: it merges mw's
// fragment into doc, an OpenAPI 3.1 document decoded into maps, and makes
// op, one of doc's operations behind mw, reference it.
func openAPIGuide(mw *idemhttp.Middleware, doc, op map[string]any) error {
	fragment, err := mw.OpenAPI() // {"components": {...}}, from mw's options
	if err != nil {
		return err
	}
	var f struct{ Components map[string]map[string]any }
	if err := json.Unmarshal(fragment, &f); err != nil {
		return err
	}
	components, _ := doc["components"].(map[string]any)
	if components == nil {
		components = map[string]any{}
		doc["components"] = components
	}
	for kind, named := range f.Components { // parameters, headers, schemas, responses
		section, _ := components[kind].(map[string]any)
		if section == nil {
			section = map[string]any{}
			components[kind] = section
		}
		for name, c := range named { // every name starts with Idempotency or Idempotent
			section[name] = c
		}
	}
	ref := func(kind, name string) map[string]any {
		return map[string]any{"$ref": "#/components/" + kind + "/" + name}
	}
	params, _ := op["parameters"].([]any)
	op["parameters"] = append(params, ref("parameters", idemhttp.OpenAPIKeyParameter))
	responses := op["responses"].(map[string]any)
	for status, name := range map[string]string{
		"400": idemhttp.OpenAPIBadRequest, "401": idemhttp.OpenAPIUnidentified, "409": idemhttp.OpenAPIInProgress,
		"410": idemhttp.OpenAPIResponseGone, "413": idemhttp.OpenAPIBodyTooLarge, "422": idemhttp.OpenAPIKeyReuse,
		"500": idemhttp.OpenAPIStoreFailed, "503": idemhttp.OpenAPIUnavailable,
	} {
		responses[status] = ref("responses", name)
	}
	// The operation's own stored answers are replayed: they carry the headers.
	stored := responses["201"].(map[string]any)
	stored["headers"] = map[string]any{
		idemhttp.HeaderReplayed:          ref("headers", idemhttp.OpenAPIReplayedHeader),
		idemhttp.HeaderReplayBodyOmitted: ref("headers", idemhttp.OpenAPIBodyOmittedHeader),
		idemhttp.HeaderKeyExpires:        ref("headers", idemhttp.OpenAPIKeyExpiresHeader),
	}
	return nil
}
