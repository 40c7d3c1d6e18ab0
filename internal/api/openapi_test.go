package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pb33f/jsonschema/v6"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
)

// wire maps every wire type of package api (an exported struct with json
// tags; TestOpenAPIWireTypes finds them in the source, so a new one must be
// added here) to its schema in the document, which has the type's name.
var wire = map[string]reflect.Type{}

func init() {
	for _, v := range []any{
		api.ExecuteRequest{}, api.FileIn{}, api.Limits{}, api.ExecuteResponse{}, api.NetworkUsage{},
		api.ExecError{}, api.FileOut{}, api.Figure{}, api.Usage{}, api.LintRequest{}, api.LintResponse{},
		api.Diagnostic{}, api.Location{}, api.FormatRequest{}, api.FormatResponse{}, api.Info{},
		api.MemoryInfo{}, api.SessionInfo{}, api.NetworkInfo{}, api.PoolInfo{}, api.RootfsInfo{},
		api.LimitValues{}, api.SeccompInfo{}, api.Capacity{}, api.CallerInfo{}, api.Health{},
		api.ErrorBody{}, api.ErrorDetail{}, api.StoredFile{}, api.FileList{}, api.FilesInfo{},
		api.SessionCreateRequest{}, api.Session{}, api.SessionList{}, api.SessionExecuteRequest{},
		api.SessionExecuteResponse{}, api.SessionStatus{}, api.SessionInterruptResponse{}, api.SessionPauseResponse{}, api.SessionForkRequest{}, api.SessionForkResponse{}, api.Snapshot{}, api.SnapshotList{}, api.SessionRestoreRequest{}, api.PauseInfo{}, api.Event{}, api.Ready{}, api.FSEntry{}, api.FSListing{}, api.CommandRequest{}, api.CommandResult{}, api.CommandUsage{}, api.CommandInfo{}, api.CommandList{}, api.CommandStdinRequest{}, api.CommandSignalRequest{}, api.TerminalControl{}, api.TerminalMessage{}, api.Output{},
		api.EventStartData{}, api.EventText{}, api.EventResultData{}, api.ImageInfo{}, api.WheelInfo{},
	} {
		t := reflect.TypeOf(v)
		wire[t.Name()] = t
	}
}

// doc is the document as JSON values (numbers as json.Number).
type doc map[string]any

func loadDoc(t *testing.T) doc {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(api.OpenAPI()))
	dec.UseNumber()
	var d doc
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return d
}

func (d doc) schemas() map[string]any {
	return d["components"].(map[string]any)["schemas"].(map[string]any)
}

// resolve follows a local $ref ("#/components/schemas/X"); it returns the
// schema and the name it was reached by ("" for an inline schema).
func (d doc) resolve(s map[string]any) (map[string]any, string) {
	ref, ok := s["$ref"].(string)
	if !ok {
		return s, ""
	}
	name, ok := strings.CutPrefix(ref, "#/components/schemas/")
	if !ok {
		return nil, ref
	}
	target, _ := d.schemas()[name].(map[string]any)
	return target, name
}

// object is a schema's properties and required list, with allOf merged
// (Go's embedded structs are allOf in the document).
func (d doc) object(t *testing.T, where string, s map[string]any) (props map[string]any, required []string) {
	props = map[string]any{}
	if all, ok := s["allOf"].([]any); ok {
		for i, part := range all {
			p, _ := d.resolve(part.(map[string]any))
			if p == nil {
				t.Fatalf("%s: allOf[%d] does not resolve", where, i)
			}
			pp, rr := d.object(t, fmt.Sprintf("%s.allOf[%d]", where, i), p)
			maps.Copy(props, pp)
			required = append(required, rr...)
		}
		return props, required
	}
	if s["type"] != "object" {
		t.Errorf("%s: type %v, want object", where, s["type"])
	}
	if p, ok := s["properties"].(map[string]any); ok {
		maps.Copy(props, p)
	}
	for _, r := range asSlice(s["required"]) {
		required = append(required, r.(string))
	}
	return props, required
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// jsonField is a field of a wire type as encoding/json sees it.
type jsonField struct {
	name      string
	omitempty bool
	typ       reflect.Type
}

// jsonFields lists t's JSON fields, those of embedded structs included (as
// encoding/json flattens them).
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for f := range t.Fields() {
		tag, ok := f.Tag.Lookup("json")
		if f.Anonymous && !ok {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{name: name, omitempty: slices.Contains(strings.Split(opts, ","), "omitempty"), typ: f.Type})
	}
	return out
}

// typesOf returns a schema's "type" as a list.
func typesOf(s map[string]any) []string {
	switch v := s["type"].(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, x := range v {
			out = append(out, x.(string))
		}
		return out
	}
	return nil
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// checkType reports how schema s fails to describe Go type gt; nullable:
// the field may be null (a pointer without omitempty).
func (d doc) checkType(gt reflect.Type, s map[string]any, nullable bool) error {
	if gt.Kind() == reflect.Pointer {
		gt = gt.Elem()
	}
	if gt == rawType {
		if s["type"] != nil || s["$ref"] != nil {
			return fmt.Errorf("json.RawMessage is any JSON value; the schema has type %v $ref %v", s["type"], s["$ref"])
		}
		if len(asSlice(s["anyOf"])) == 0 && len(asSlice(s["oneOf"])) == 0 {
			return fmt.Errorf("json.RawMessage: the schema should list what the value may be (anyOf)")
		}
		return nil
	}
	if gt.Kind() == reflect.Struct && gt != timeType {
		// A nested wire type: a $ref to its schema, or when nullable a
		// oneOf of that $ref and null.
		target := s
		if nullable {
			alts := asSlice(s["oneOf"])
			if len(alts) != 2 || !slices.Equal(typesOf(alts[1].(map[string]any)), []string{"null"}) {
				return fmt.Errorf("%s may be null: want oneOf [$ref, {type: null}], got %v", gt.Name(), s)
			}
			target = alts[0].(map[string]any)
		}
		_, name := d.resolve(target)
		if name != gt.Name() {
			return fmt.Errorf("want $ref to %s, got %q", gt.Name(), name)
		}
		if _, ok := wire[name]; !ok || gt.PkgPath() != wire[name].PkgPath() {
			return fmt.Errorf("%s is not a wire type of package api", gt)
		}
		return nil
	}
	want := ""
	switch gt.Kind() {
	case reflect.String:
		want = "string"
	case reflect.Struct: // time.Time
		want = "string"
		if s["format"] != "date-time" {
			return fmt.Errorf("time.Time: want format date-time, got %v", s["format"])
		}
	case reflect.Bool:
		want = "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		want = "integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = "integer"
		if m, ok := s["minimum"].(json.Number); !ok || m.String() == "" || strings.HasPrefix(m.String(), "-") {
			return fmt.Errorf("%s: an unsigned integer needs a minimum of at least 0, got %v", gt, s["minimum"])
		}
	case reflect.Float32, reflect.Float64:
		want = "number"
	case reflect.Slice:
		want = "array"
	case reflect.Map:
		want = "object"
	default:
		return fmt.Errorf("no JSON type for Go %s", gt)
	}
	got := typesOf(s)
	exp := []string{want}
	if nullable {
		exp = append(exp, "null")
	}
	if !slices.Equal(got, exp) {
		return fmt.Errorf("Go %s: want type %v, got %v", gt, exp, got)
	}
	switch gt.Kind() {
	case reflect.Slice:
		items, ok := s["items"].(map[string]any)
		if !ok {
			return fmt.Errorf("array without items")
		}
		if err := d.checkType(gt.Elem(), items, false); err != nil {
			return fmt.Errorf("items: %w", err)
		}
	case reflect.Map:
		if gt.Key().Kind() != reflect.String {
			return fmt.Errorf("map key %s is not a string", gt.Key())
		}
		ap, ok := s["additionalProperties"].(map[string]any)
		if !ok {
			return fmt.Errorf("map without an additionalProperties schema")
		}
		if err := d.checkType(gt.Elem(), ap, false); err != nil {
			return fmt.Errorf("additionalProperties: %w", err)
		}
	}
	return nil
}

// wireStructs lists the exported struct types of package api's source
// that have a json tag: the wire types.
func wireStructs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || !ts.Name.IsExported() {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			for _, field := range st.Fields.List {
				if field.Tag != nil && strings.Contains(field.Tag.Value, `json:"`) {
					names = append(names, ts.Name.Name)
					break
				}
			}
			return true
		})
	}
	slices.Sort(names)
	return names
}

// TestOpenAPIWireTypes holds the document to the wire types, both ways:
// every wire type has a schema of its name and every schema is a wire
// type; every JSON field is a property with the JSON type of its Go type
// (null allowed exactly for pointers without omitempty, items of slices,
// values of maps, $ref for nested wire types), required exactly when not
// omitempty; and every property is a field.
func TestOpenAPIWireTypes(t *testing.T) {
	d := loadDoc(t)
	if got, want := wireStructs(t), slices.Sorted(maps.Keys(wire)); !slices.Equal(got, want) {
		t.Fatalf("the wire types in the source are\n%v\nthe test maps\n%v\n(add a new type to wire, and its schema to openapi.json)", got, want)
	}
	schemas := d.schemas()
	for name := range schemas {
		if _, ok := wire[name]; !ok {
			t.Errorf("components.schemas.%s is no wire type of package api", name)
		}
	}
	fields := 0
	for name, gt := range wire {
		raw, ok := schemas[name].(map[string]any)
		if !ok {
			t.Errorf("%s has no schema in components.schemas", name)
			continue
		}
		if desc, _ := raw["description"].(string); desc == "" {
			t.Errorf("%s: the schema has no description", name)
		}
		props, required := d.object(t, name, raw)
		seen := map[string]bool{}
		for _, f := range jsonFields(gt) {
			fields++
			seen[f.name] = true
			p, ok := props[f.name].(map[string]any)
			if !ok {
				t.Errorf("%s.%s (Go %s) is not a property of its schema", name, f.name, f.typ)
				continue
			}
			if desc, _ := p["description"].(string); desc == "" {
				t.Errorf("%s.%s: no description", name, f.name)
			}
			nullable := f.typ.Kind() == reflect.Pointer && !f.omitempty
			if err := d.checkType(f.typ, p, nullable); err != nil {
				t.Errorf("%s.%s: %v", name, f.name, err)
			}
			if req := slices.Contains(required, f.name); req == f.omitempty {
				t.Errorf("%s.%s: required %v, but the field is omitempty=%v (required exactly when always sent)", name, f.name, req, f.omitempty)
			}
		}
		for p := range props {
			if !seen[p] {
				t.Errorf("%s: property %q is not a field of Go's %s", name, p, gt)
			}
		}
		for _, r := range required {
			if !seen[r] {
				t.Errorf("%s: required %q is not a field", name, r)
			}
		}
	}
	t.Logf("%d wire types, %d fields, checked both ways", len(wire), fields)
}

// TestOpenAPIRequestsClosed: the server refuses unknown fields in every
// JSON body it decodes, so every schema a request body reaches says so.
func TestOpenAPIRequestsClosed(t *testing.T) {
	d := loadDoc(t)
	reached := map[string]bool{}
	var walk func(s map[string]any)
	walk = func(s map[string]any) {
		s2, name := d.resolve(s)
		if name != "" {
			if reached[name] {
				return
			}
			reached[name] = true
		}
		for _, k := range []string{"allOf", "anyOf", "oneOf"} {
			for _, x := range asSlice(s2[k]) {
				walk(x.(map[string]any))
			}
		}
		if p, ok := s2["properties"].(map[string]any); ok {
			for _, x := range p {
				walk(x.(map[string]any))
			}
		}
		if it, ok := s2["items"].(map[string]any); ok {
			walk(it)
		}
	}
	for path, item := range d["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			o, ok := op.(map[string]any)
			if !ok {
				continue // the path's parameters
			}
			rb, ok := o["requestBody"].(map[string]any)
			if !ok {
				continue
			}
			if mt, ok := rb["content"].(map[string]any)["application/json"].(map[string]any); ok {
				s := mt["schema"].(map[string]any)
				if _, name := d.resolve(s); name == "" && s["maxProperties"] == nil && s["additionalProperties"] != false {
					t.Errorf("%s %s: an inline JSON body schema that admits unknown fields", method, path)
				}
				walk(s)
			}
		}
	}
	for name := range reached {
		if s := d.schemas()[name].(map[string]any); s["additionalProperties"] != false {
			t.Errorf("%s is (part of) a request body, but admits unknown fields: want additionalProperties false", name)
		}
	}
	if len(reached) < 7 {
		t.Errorf("request bodies reach %d schemas (%v), want the 7 request types", len(reached), reached)
	}
}

// errorClasses are the classes of internal/errdefs, read from its source:
// the names of its errors.New("...") variables.
func errorClasses(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../errdefs/errdefs.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Values) != 1 {
			return true
		}
		call, ok := vs.Values[0].(*ast.CallExpr)
		if !ok || len(call.Args) != 1 {
			return true
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "New" {
			return true
		}
		if lit, ok := call.Args[0].(*ast.BasicLit); ok {
			s, _ := strconv.Unquote(lit.Value)
			names = append(names, s)
		}
		return true
	})
	slices.Sort(names)
	return names
}

// TestOpenAPIErrors: the error type enum is exactly errdefs' classes, and
// every error response of every operation is an ErrorBody whose examples'
// types map (in errdefs, the one mapping) to the response's status.
func TestOpenAPIErrors(t *testing.T) {
	d := loadDoc(t)
	classes := errorClasses(t)
	if len(classes) < 10 {
		t.Fatalf("found %d classes in errdefs.go: %v", len(classes), classes)
	}
	detail := d.schemas()["ErrorDetail"].(map[string]any)["properties"].(map[string]any)["type"].(map[string]any)
	var enum []string
	for _, e := range asSlice(detail["enum"]) {
		enum = append(enum, e.(string))
	}
	slices.Sort(enum)
	if !slices.Equal(enum, classes) {
		t.Errorf("ErrorDetail.type enum %v, errdefs classes %v", enum, classes)
	}
	responses := d["components"].(map[string]any)["responses"].(map[string]any)
	seen := map[string]bool{}
	checkResponse := func(where string, code int, resp map[string]any) {
		if ref, ok := resp["$ref"].(string); ok {
			resp = responses[strings.TrimPrefix(ref, "#/components/responses/")].(map[string]any)
		}
		mt, ok := resp["content"].(map[string]any)["application/json"].(map[string]any)
		if !ok {
			t.Errorf("%s %d: no application/json error body", where, code)
			return
		}
		if _, name := d.resolve(mt["schema"].(map[string]any)); name != "ErrorBody" {
			t.Errorf("%s %d: the body is %q, want ErrorBody", where, code, name)
		}
		exs, _ := mt["examples"].(map[string]any)
		if len(exs) == 0 {
			t.Errorf("%s %d: no example", where, code)
		}
		for k, ex := range exs {
			typ := ex.(map[string]any)["value"].(map[string]any)["error"].(map[string]any)["type"].(string)
			seen[typ] = true
			status, name := errdefs.Classify(errdefs.FromName(typ))
			if name != typ || status != code {
				t.Errorf("%s %d: example %s has type %q, which errdefs maps to %d %s", where, code, k, typ, status, name)
			}
			if !strings.Contains(resp["description"].(string), "`"+typ+"`") {
				t.Errorf("%s %d: the description does not name the type %q", where, code, typ)
			}
		}
	}
	ops := 0
	for path, item := range d["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			if method == "parameters" {
				continue
			}
			ops++
			responses := op.(map[string]any)["responses"].(map[string]any)
			for code, resp := range responses {
				c, err := strconv.Atoi(code)
				if err != nil {
					t.Errorf("%s %s: response %q is not a status code", method, path, code)
					continue
				}
				r := resp.(map[string]any)
				if c >= 400 && isAnswer(d, r, responses["200"]) {
					continue // the status is the answer (GET /v1/ready's 503), not an error
				}
				if c >= 400 && r["content"] != nil || r["$ref"] != nil {
					checkResponse(method+" "+path, c, r)
				}
			}
		}
	}
	for _, name := range []string{"MethodNotAllowed", "PathNotFound"} {
		status := map[string]int{"MethodNotAllowed": http.StatusMethodNotAllowed, "PathNotFound": http.StatusNotFound}[name]
		checkResponse("components.responses."+name, status, responses[name].(map[string]any))
	}
	for _, c := range classes {
		if !seen[c] {
			t.Errorf("no error response of the document shows type %q", c)
		}
	}
	t.Logf("%d operations; every error class shown with its status", ops)
}

// isAnswer reports whether an error status's response r has the body of
// the operation's 200 (ok), other than ErrorBody: an operation whose
// status is part of its answer, as GET /v1/ready's 503 is.
func isAnswer(d doc, r, ok any) bool {
	schema := func(v any) string {
		m, _ := v.(map[string]any)
		ct, _ := m["content"].(map[string]any)
		mt, _ := ct["application/json"].(map[string]any)
		s, _ := mt["schema"].(map[string]any)
		if s == nil {
			return ""
		}
		_, name := d.resolve(s)
		return name
	}
	name := schema(r)
	return name != "" && name != "ErrorBody" && name == schema(ok)
}

// TestOpenAPIDocumentValid validates the document with a real OpenAPI 3.1
// validator (libopenapi-validator: the document against the official
// 3.1 schema, every $ref resolved), compiles every schema in it against
// JSON Schema 2020-12's meta-schema, and checks every example against
// its schema.
func TestOpenAPIDocumentValid(t *testing.T) {
	spec := api.OpenAPI()
	od, err := libopenapi.NewDocument(spec)
	if err != nil {
		t.Fatal(err)
	}
	if v := od.GetVersion(); v != "3.1.0" {
		t.Errorf("openapi %q, want 3.1.0", v)
	}
	v, errs := validator.NewValidator(od)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("%s: %s", e.Message, e.Reason)
			for _, se := range e.SchemaValidationErrors {
				t.Errorf("  %s %s: %s", se.KeywordLocation, se.FieldPath, se.Reason)
			}
		}
	}

	// Every schema object, with a JSON pointer to it.
	var root any
	if err := json.Unmarshal(spec, &root); err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource("openapi.json", root); err != nil {
		t.Fatal(err)
	}
	type located struct {
		ptr string
		v   any
	}
	var schemaPtrs, examples []located
	var walk func(ptr string, v any, inSchema bool)
	esc := strings.NewReplacer("~", "~0", "/", "~1")
	walk = func(ptr string, v any, inSchema bool) {
		m, ok := v.(map[string]any)
		if !ok {
			if s, ok := v.([]any); ok {
				for i, x := range s {
					walk(ptr+"/"+strconv.Itoa(i), x, inSchema)
				}
			}
			return
		}
		for k, x := range m {
			p := ptr + "/" + esc.Replace(k)
			switch {
			case inSchema:
				walk(p, x, true) // a schema's own subschemas are compiled with it
			case k == "schema":
				schemaPtrs = append(schemaPtrs, located{p, x})
				walk(p, x, true)
			case k == "examples" && ptr != "" && m["schema"] != nil:
				for name, ex := range x.(map[string]any) {
					examples = append(examples, located{ptr + "/schema", ex.(map[string]any)["value"]})
					_ = name
				}
			default:
				walk(p, x, false)
			}
		}
	}
	walk("", root, false)
	for name := range root.(map[string]any)["components"].(map[string]any)["schemas"].(map[string]any) {
		schemaPtrs = append(schemaPtrs, located{"/components/schemas/" + name, nil})
	}
	for _, s := range schemaPtrs {
		if _, err := c.Compile("openapi.json#" + s.ptr); err != nil {
			t.Errorf("schema %s: %v", s.ptr, err)
		}
	}
	for _, ex := range examples {
		sch, err := c.Compile("openapi.json#" + ex.ptr)
		if err != nil {
			t.Errorf("%s: %v", ex.ptr, err)
			continue
		}
		if err := sch.Validate(ex.v); err != nil {
			t.Errorf("an example of %s does not match it: %v", ex.ptr, err)
		}
	}
	if len(examples) < 10 || len(schemaPtrs) < 60 {
		t.Errorf("checked %d examples and %d schemas: the walk missed them", len(examples), len(schemaPtrs))
	}
	t.Logf("valid OpenAPI %s; %d schemas compiled, %d examples match", od.GetVersion(), len(schemaPtrs), len(examples))

	// The validator sees what the meta-schema would: a broken document
	// fails (so a pass above means something).
	broken := bytes.Replace(spec, []byte(`"description": "Liveness"`), []byte(`"description": 7`), 1)
	broken = bytes.Replace(broken, []byte(`"summary": "Liveness"`), []byte(`"summary": 7`), 1)
	bd, err := libopenapi.NewDocument(broken)
	if err == nil {
		if bv, errs := validator.NewValidator(bd); len(errs) == 0 {
			if ok, _ := bv.ValidateDocument(); ok {
				t.Error("a document with a number for a summary passed validation")
			}
		}
	}
}
