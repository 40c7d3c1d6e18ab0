package workspace

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jaild/jaild/internal/run/spec"
)

func writeOutput(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// types lists an output's MIME types in order, with each value's kind.
func types(o Output) string {
	var s []string
	for _, v := range o.Data {
		kind := "text"
		switch {
		case v.Bytes != nil:
			kind = "bytes"
		case v.JSON != nil:
			kind = "json"
		}
		s = append(s, v.Type+"="+kind)
	}
	return o.Type + ":" + strings.Join(s, ",")
}

func TestParseOutput(t *testing.T) {
	png := base64.StdEncoding.EncodeToString(append(append([]byte{}, pngMagic...), "rest"...))
	for _, c := range []struct {
		name, body, want string
		md               string
	}{
		{"ordered", `{"data": {"text/html": "<b>x</b>", "image/png": "` + png + `", "application/json": {"a": [1, 2]}, "text/plain": "x"}, "metadata": {"image/png": {"width": 3}}}`,
			"display_data:text/html=text,image/png=bytes,application/json=json,text/plain=text", `{"image/png":{"width":3}}`},
		{"custom json type", `{"data": {"application/vnd.x+json": [1], "text/plain": "p"}}`, "display_data:application/vnd.x+json=json,text/plain=text", ""},
		{"bad values dropped", `{"data": {"image/png": "bm90IGEgcG5n", "image/jpeg": 5, "text/html": ["a", "b"], "bad type": "x", "/x": "x", "x/": "x", "text/plain": "ok"}}`,
			"display_data:text/plain=text", ""},
		{"not base64", `{"data": {"image/png": "%%%", "text/plain": "ok"}}`, "display_data:text/plain=text", ""},
		{"metadata not an object", `{"data": {"text/plain": "ok"}, "metadata": [1]}`, "display_data:text/plain=text", ""},
		{"duplicate type keeps the first", `{"data": {"text/plain": "a", "text/plain": "b"}}`, "display_data:text/plain=text", ""},
	} {
		o, ok := ParseOutput([]byte(c.body), spec.OutputDisplay)
		if !ok || types(o) != c.want || string(o.Metadata) != c.md {
			t.Errorf("%s: got %v %q metadata %q; want %q %q", c.name, ok, types(o), o.Metadata, c.want, c.md)
		}
	}
	for _, bad := range []string{
		``, `null`, `[]`, `{"data": {}}`, `{"data": {"image/png": "x"}}`, `{"data": {"text/plain": "x"}, "extra": 1}`,
		`{"metadata": {}}`, `{"data": "x"}`, `{"data": {"text/plain": "x"`, strings.Repeat("[", 100000),
	} {
		if o, ok := ParseOutput([]byte(bad), spec.OutputDisplay); ok {
			t.Errorf("%.40q: accepted as %q", bad, types(o))
		}
	}
	// Invalid UTF-8 in a text becomes U+FFFD.
	o, ok := ParseOutput([]byte("{\"data\": {\"text/plain\": \"a\xffb\"}}"), spec.OutputDisplay)
	if !ok || string(o.Data[0].Text) != "a\uFFFDb" {
		t.Errorf("invalid UTF-8: %v %q", ok, o.Data)
	}
	// At most maxMimeTypes types.
	data := map[string]string{}
	for i := range 40 {
		data["text/x-"+strings.Repeat("a", i+1)] = "v"
	}
	body, _ := json.Marshal(map[string]any{"data": data})
	if o, ok := ParseOutput(body, spec.OutputDisplay); !ok || len(o.Data) != maxMimeTypes {
		t.Errorf("40 types: %v %d", ok, len(o.Data))
	}
}

func TestReadOutputs(t *testing.T) {
	dir := t.TempDir()
	png := append(append([]byte{}, pngMagic...), "figure"...)
	figs := []Figure{{Name: "figure-1.png", Data: png}, {Name: "figure-2.png", Data: png}}
	writeOutput(t, dir, "output-1.json", `{"data": {"text/markdown": "# a", "text/plain": "a"}}`)
	writeOutput(t, dir, "output-2.json", `{"data": {"text/html": "<p>r</p>"}}`)
	writeOutput(t, dir, "output-4.json", `not json`)
	if err := os.Symlink(filepath.Join(dir, "output-1.json"), filepath.Join(dir, "output-5.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "output-6.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	repr := "R()"
	refs := []spec.OutputRef{
		{Type: spec.OutputDisplay, Name: "output-1.json"},
		{Type: spec.OutputDisplay, Figure: "figure-2.png", Text: "<Figure 2>"},
		{Type: spec.OutputDisplay, Name: "output-3.json"},  // missing
		{Type: spec.OutputDisplay, Name: "output-4.json"},  // malformed
		{Type: spec.OutputDisplay, Name: "output-5.json"},  // a link
		{Type: spec.OutputDisplay, Name: "output-6.json"},  // a directory
		{Type: spec.OutputDisplay, Figure: "figure-9.png"}, // no such figure
		{Type: spec.OutputResult, Name: "output-2.json"},
	}
	out := ReadOutputs(dir, refs, figs, &repr)
	var got []string
	for _, o := range out {
		got = append(got, types(o))
	}
	want := []string{
		"display_data:text/markdown=text,text/plain=text",
		"display_data:image/png=bytes,text/plain=text",
		"execute_result:text/html=text,text/plain=text", // text/plain added from the repr
		"display_data:image/png=bytes,text/plain=text",  // figure-1, named by no record
	}
	if strings.Join(got, " | ") != strings.Join(want, " | ") {
		t.Fatalf("outputs\n%v\nwant\n%v", got, want)
	}
	if string(out[1].Data[1].Text) != "<Figure 2>" || string(out[2].Data[1].Text) != "R()" || string(out[3].Data[1].Text) != "<Figure>" {
		t.Errorf("texts: %q %q %q", out[1].Data[1].Text, out[2].Data[1].Text, out[3].Data[1].Text)
	}
	if &out[1].Data[0].Bytes[0] != &figs[1].Data[0] {
		t.Error("a figure's output copies its bytes")
	}

	// A result without a file, or whose file is bad, is its repr; a repr
	// no record names comes last; no directory at all still gives it.
	for _, refs := range [][]spec.OutputRef{{{Type: spec.OutputResult}}, {{Type: spec.OutputResult, Name: "output-4.json"}}, nil} {
		out := ReadOutputs(filepath.Join(dir, "missing"), refs, nil, &repr)
		if len(out) != 1 || types(out[0]) != "execute_result:text/plain=text" || string(out[0].Data[0].Text) != repr {
			t.Errorf("%v: %v", refs, out)
		}
	}
	if out := ReadOutputs(dir, []spec.OutputRef{{Type: spec.OutputResult, Name: "output-2.json"}}, nil, nil); len(out) != 0 {
		t.Errorf("a result record without a repr: %v", out)
	}
}

func TestReadOutputsBounds(t *testing.T) {
	dir := t.TempDir()
	var refs []spec.OutputRef
	for i := 1; i <= MaxOutputs+5; i++ {
		name := "output-" + strconv.Itoa(i) + ".json"
		writeOutput(t, dir, name, `{"data": {"text/plain": "x"}}`)
		refs = append(refs, spec.OutputRef{Type: spec.OutputDisplay, Name: name})
	}
	if out := ReadOutputs(dir, refs, nil, nil); len(out) != MaxOutputs {
		t.Errorf("%d outputs kept, want %d", len(out), MaxOutputs)
	}
	// Files past MaxOutputBytes are left out, and so are those past the
	// total the figures leave.
	big := `{"data": {"text/plain": "` + strings.Repeat("x", MaxOutputBytes) + `"}}`
	writeOutput(t, dir, "output-1.json", big)
	half := `{"data": {"text/plain": "` + strings.Repeat("x", 6<<20) + `"}}`
	writeOutput(t, dir, "output-2.json", half)
	writeOutput(t, dir, "output-3.json", half)
	figs := []Figure{{Name: "figure-1.png", Data: make([]byte, MaxFiguresTotalBytes-10<<20)}}
	out := ReadOutputs(dir, refs[:3], figs, nil)
	if len(out) != 2 || len(out[0].Data[0].Text) != 6<<20 || out[1].Data[0].Bytes == nil {
		t.Errorf("bounded: %d outputs", len(out))
	}
}
