package workspace

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/run/spec"
)

// Bounds on rich outputs (see spec).
const (
	MaxOutputs     = spec.MaxOutputs
	MaxOutputBytes = spec.MaxOutputBytes
	// maxMimeTypes bounds the types of one bundle, maxMimeTypeBytes a
	// type's name, maxMetadataBytes an output's metadata (larger is {}).
	maxMimeTypes     = 32
	maxMimeTypeBytes = 128
	maxMetadataBytes = 64 << 10
)

// Output is one rich output read back from a figures directory.
type Output = spec.Output

// Magic numbers a binary type's value must start with.
var mimeMagic = map[string][]string{
	"image/png":       {string(pngMagic)},
	"image/jpeg":      {"\xff\xd8\xff"},
	"application/pdf": {"%PDF-"},
}

// ReadOutputs reads a run's rich outputs, in the order of refs (the
// runner's records), from the figures directory dir: each output-N.json a
// ref names, parsed strictly (parseOutput); each figure as an image/png
// output sharing figs' bytes; a result without a file as text/plain
// repr. Figures no ref names follow in their order, and a result repr
// no ref names comes last: a forged or lost record never hides one. Files
// are opened beneath dir without following links, regular files only, at
// most MaxOutputBytes each; the outputs' bytes and the figures' together
// stay within MaxFiguresTotalBytes, and at most MaxOutputs are kept:
// what does not fit is left out. Everything read comes from the jail.
func ReadOutputs(dir string, refs []spec.OutputRef, figs []Figure, repr *string) []Output {
	budget := int64(MaxFiguresTotalBytes)
	for _, f := range figs {
		budget -= int64(len(f.Data))
	}
	dfd := -1 // opened only for a run whose records name output files
	if slices.ContainsFunc(refs, func(r spec.OutputRef) bool { return r.Name != "" }) {
		if fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0); err == nil {
			dfd = fd
			defer unix.Close(dfd)
		}
	}
	figure := func(name, text string) (Output, bool) {
		for _, f := range figs {
			if f.Name == name {
				if text == "" {
					text = "<Figure>"
				}
				return Output{Type: spec.OutputDisplay, Data: []spec.MimeValue{
					{Type: "image/png", Bytes: f.Data},
					{Type: "text/plain", Text: []byte(text)},
				}}, true
			}
		}
		return Output{}, false
	}
	text := func(s string) Output {
		return Output{Type: spec.OutputResult, Data: []spec.MimeValue{{Type: "text/plain", Text: []byte(s)}}}
	}
	var out []Output
	shown := map[string]bool{}
	haveResult := false
	for _, ref := range refs {
		if len(out) == MaxOutputs {
			break
		}
		switch {
		case ref.Figure != "":
			if o, ok := figure(ref.Figure, ref.Text); ok && !shown[ref.Figure] {
				shown[ref.Figure] = true
				out = append(out, o)
			}
		case ref.Type == spec.OutputResult && repr != nil && !haveResult:
			haveResult = true
			o, ok := Output{}, false
			if ref.Name != "" && dfd >= 0 {
				o, ok = readOutput(dfd, ref.Name, spec.OutputResult, &budget)
			}
			if !ok {
				o = text(*repr)
			} else if !hasType(o, "text/plain") {
				o.Data = append(o.Data, spec.MimeValue{Type: "text/plain", Text: []byte(*repr)})
			}
			out = append(out, o)
		case ref.Type == spec.OutputDisplay && ref.Name != "" && dfd >= 0:
			if o, ok := readOutput(dfd, ref.Name, spec.OutputDisplay, &budget); ok {
				out = append(out, o)
			}
		}
	}
	for _, f := range figs {
		if len(out) < MaxOutputs && !shown[f.Name] {
			o, _ := figure(f.Name, "")
			out = append(out, o)
		}
	}
	if repr != nil && !haveResult && len(out) < MaxOutputs {
		out = append(out, text(*repr))
	}
	return out
}

func hasType(o Output, typ string) bool {
	for _, v := range o.Data {
		if v.Type == typ {
			return true
		}
	}
	return false
}

// readOutput reads and parses the output file name beneath dfd, taking
// its bytes from budget; false when it is not there, not a regular file,
// too large for either bound, or malformed.
func readOutput(dfd int, name, typ string, budget *int64) (Output, bool) {
	fd, err := openBeneath(dfd, name, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return Output{}, false
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > MaxOutputBytes || st.Size > *budget {
		return Output{}, false
	}
	data, err := readExactly(f, st.Size)
	if err != nil {
		return Output{}, false
	}
	o, ok := ParseOutput(data, typ)
	if !ok {
		return Output{}, false
	}
	var n int64
	for _, v := range o.Data {
		n += v.Size()
	}
	n += int64(len(o.Metadata))
	if n > *budget {
		return Output{}, false
	}
	*budget -= n
	return o, true
}

// ParseOutput parses an output file, {"data": {TYPE: VALUE, ...},
// "metadata": {...}}, strictly: nothing else at the top; at most
// maxMimeTypes types, each a type/subtype name of at most
// maxMimeTypeBytes; image/png, image/jpeg and application/pdf as base64
// that decodes to their magic number; application/json and the +json
// types as any JSON value; every other type as a string (invalid UTF-8
// becomes U+FFFD). A value that breaks its rule is left out; an output
// left with no value is refused. Metadata must be an object of at most
// maxMetadataBytes, else it is {}.
func ParseOutput(data []byte, typ string) (Output, bool) {
	var file map[string]json.RawMessage
	if json.Unmarshal(data, &file) != nil {
		return Output{}, false
	}
	for k := range file {
		if k != "data" && k != "metadata" {
			return Output{}, false
		}
	}
	raw, ok := file["data"]
	if !ok {
		return Output{}, false
	}
	// Decoded in order: the runner's order is IPython's.
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return Output{}, false
	}
	o := Output{Type: typ}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return Output{}, false
		}
		key, _ := t.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return Output{}, false
		}
		if !validMimeType(key) || seen[key] || len(o.Data) == maxMimeTypes {
			continue
		}
		if v, ok := mimeValue(key, value); ok {
			seen[key] = true
			o.Data = append(o.Data, v)
		}
	}
	if len(o.Data) == 0 {
		return Output{}, false
	}
	if md, ok := file["metadata"]; ok && len(md) <= maxMetadataBytes {
		var obj map[string]json.RawMessage
		var buf bytes.Buffer
		if json.Unmarshal(md, &obj) == nil && obj != nil && json.Compact(&buf, md) == nil && buf.Len() > 2 {
			o.Metadata = buf.Bytes()
		}
	}
	return o, true
}

func mimeValue(typ string, value json.RawMessage) (spec.MimeValue, bool) {
	v := spec.MimeValue{Type: typ}
	if magics, binary := mimeMagic[typ]; binary {
		var s string
		if json.Unmarshal(value, &s) != nil {
			return v, false
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return v, false
		}
		for _, m := range magics {
			if bytes.HasPrefix(b, []byte(m)) {
				v.Bytes = b
				return v, true
			}
		}
		return v, false
	}
	if typ == "application/json" || (len(typ) > 5 && typ[len(typ)-5:] == "+json") {
		var buf bytes.Buffer
		if json.Compact(&buf, value) != nil {
			return v, false
		}
		v.JSON = buf.Bytes()
		return v, true
	}
	var s string
	if json.Unmarshal(value, &s) != nil {
		return v, false
	}
	v.Text = []byte(s)
	return v, true
}

// validMimeType: type "/" subtype, each of RFC 6838's restricted name
// characters, at most maxMimeTypeBytes in all.
func validMimeType(s string) bool {
	if len(s) == 0 || len(s) > maxMimeTypeBytes {
		return false
	}
	slash := -1
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '/':
			if slash >= 0 || i == 0 {
				return false
			}
			slash = i
		case (c == '!' || c == '#' || c == '$' || c == '&' || c == '-' || c == '^' || c == '_' || c == '.' || c == '+') && i > 0 && i != slash+1:
		default:
			return false
		}
	}
	return slash > 0 && slash < len(s)-1
}
