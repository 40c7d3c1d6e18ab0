package api

import (
	"bytes"
	_ "embed"
)

// openapi is the OpenAPI 3.1 document of this API: every endpoint, field,
// bound, status and error type. Tests hold it to the wire types of this
// package and to the server's routes.
//
//go:embed openapi.json
var openapi []byte

// OpenAPI returns the API's OpenAPI 3.1 document, as served at GET
// /v1/openapi.json (a copy: the caller may keep or change it).
func OpenAPI() []byte { return bytes.Clone(openapi) }
