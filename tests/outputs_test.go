package tests

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"slices"
	"strings"
	"testing"

	"github.com/jaild/jaild/internal/api"
)

// richCode shows, in this order: a DataFrame, a Series, a pyplot figure,
// an SVG, Markdown, a _repr_mimebundle_ object, a raw bundle; then a
// figure left open (saved at the end) and a DataFrame as the last line.
const richCode = `import pandas as pd
import matplotlib.pyplot as plt
df = pd.DataFrame({"a": [1, 2], "b": ["x", "<y>"]})
display(df)
display(df["a"])
fig = plt.figure(); plt.plot([1, 3, 2])
display(fig)
class Svg:
    def _repr_svg_(self):
        return '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><rect width="4" height="4"/></svg>'
class Md:
    def _repr_markdown_(self):
        return "# Title", {"note": 1}
class Bundle:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/latex": "$x^2$", "application/json": {"k": [1, None]}, "text/plain": "Bundle!"}
display(Svg(), Md(), Bundle())
display({"text/plain": "raw", "text/html": "<i>raw</i>"}, raw=True)
plt.figure(); plt.plot([2, 1])
df
`

// outputText is the string value of an output's type, or "".
func outputText(t *testing.T, o api.Output, typ string) string {
	t.Helper()
	var s string
	if v, ok := o.Data[typ]; ok && json.Unmarshal(v, &s) != nil {
		t.Errorf("%s is not a string: %s", typ, v)
	}
	return s
}

func outputKinds(outs []api.Output) []string {
	var kinds []string
	for _, o := range outs {
		var types []string
		for k := range o.Data {
			types = append(types, k)
		}
		slices.Sort(types)
		kinds = append(kinds, o.OutputType+":"+strings.Join(types, ","))
	}
	return kinds
}

// checkRichOutputs checks what richCode produced.
func checkRichOutputs(t *testing.T, r *api.ExecuteResponse) {
	t.Helper()
	if r.Status != "ok" {
		t.Fatalf("status %s: %s %s", r.Status, r.Message, r.Stderr)
	}
	want := []string{
		"display_data:text/html,text/plain",                   // DataFrame
		"display_data:text/html,text/plain",                   // Series
		"display_data:image/png,text/plain",                   // display(fig)
		"display_data:image/svg+xml,text/plain",               // Svg
		"display_data:text/markdown,text/plain",               // Md
		"display_data:application/json,text/latex,text/plain", // Bundle
		"display_data:text/html,text/plain",                   // raw
		"execute_result:text/html,text/plain",                 // df
		"display_data:image/png,text/plain",                   // the figure left open
	}
	if got := outputKinds(r.Outputs); !slices.Equal(got, want) {
		t.Fatalf("outputs\n%q\nwant\n%q\nstderr %s", got, want, r.Stderr)
	}
	o := r.Outputs
	if html := outputText(t, o[0], "text/html"); !strings.Contains(html, "<table") || !strings.Contains(html, "&lt;y&gt;") {
		t.Errorf("DataFrame HTML %q", html)
	}
	if html := outputText(t, o[1], "text/html"); !strings.Contains(html, "<table") || !strings.Contains(outputText(t, o[1], "text/plain"), "Name: a") {
		t.Errorf("Series HTML %q", html)
	}
	// Both figures are the figures field's, in order, and decode as PNGs.
	if len(r.Figures) != 2 || outputText(t, o[2], "image/png") != r.Figures[0].ContentB64 || outputText(t, o[8], "image/png") != r.Figures[1].ContentB64 {
		t.Fatalf("figures %d, not the outputs' images", len(r.Figures))
	}
	data, _ := base64.StdEncoding.DecodeString(outputText(t, o[2], "image/png"))
	if _, err := png.Decode(bytes.NewReader(data)); err != nil {
		t.Errorf("figure output: %v", err)
	}
	if outputText(t, o[2], "text/plain") != "<Figure size 640x480 with 1 Axes>" {
		t.Errorf("figure text %q", outputText(t, o[2], "text/plain"))
	}
	if !strings.HasPrefix(outputText(t, o[3], "image/svg+xml"), "<svg") || outputText(t, o[4], "text/markdown") != "# Title" || string(o[4].Metadata["text/markdown"]) != `{"note":1}` {
		t.Errorf("svg %q markdown %q metadata %s", outputText(t, o[3], "image/svg+xml"), outputText(t, o[4], "text/markdown"), o[4].Metadata)
	}
	if outputText(t, o[5], "text/latex") != "$x^2$" || string(o[5].Data["application/json"]) != `{"k":[1,null]}` || outputText(t, o[5], "text/plain") != "Bundle!" {
		t.Errorf("bundle %+v", o[5].Data)
	}
	if r.Result == nil || outputText(t, o[7], "text/plain") != *r.Result || !strings.Contains(outputText(t, o[7], "text/html"), "<table") {
		t.Errorf("execute_result %v vs result %v", o[7].Data, r.Result)
	}
}

func TestRichOutputs(t *testing.T) {
	req := api.ExecuteRequest{Code: richCode, LastLineInteractive: true, Limits: &api.Limits{TimeoutMs: ptr(int64(60000))}}
	checkRichOutputs(t, execute(t, req))

	// Streamed: display and result events in the same order, figures
	// among them, and done without them.
	resp, err := postStream(context.Background(), shared, "/v1/execute", shared.withInject(req), api.MediaNDJSON)
	if err != nil {
		t.Fatal(err)
	}
	events, err := readEvents(resp, api.MediaNDJSON)
	if err != nil {
		t.Fatal(err)
	}
	var streamed api.ExecuteResponse
	for _, a := range events {
		switch a.Event.Event {
		case api.EventDisplay:
			var o api.Output
			if err := json.Unmarshal(a.Data, &o); err != nil {
				t.Fatal(err)
			}
			streamed.Outputs = append(streamed.Outputs, o)
		case api.EventResult:
			var rd api.EventResultData
			if err := json.Unmarshal(a.Data, &rd); err != nil {
				t.Fatal(err)
			}
			streamed.Result = &rd.Repr
			streamed.Outputs = append(streamed.Outputs, api.Output{OutputType: api.OutputExecuteResult, Data: rd.Data})
		case api.EventFigure:
			var f api.Figure
			if err := json.Unmarshal(a.Data, &f); err != nil {
				t.Fatal(err)
			}
			streamed.Figures = append(streamed.Figures, f)
		case api.EventDone:
			var done api.ExecuteResponse
			if err := json.Unmarshal(a.Data, &done); err != nil {
				t.Fatal(err)
			}
			if len(done.Outputs) != 0 || len(done.Figures) != 0 {
				t.Errorf("done repeats %d outputs, %d figures", len(done.Outputs), len(done.Figures))
			}
			streamed.Status, streamed.Stderr = done.Status, done.Stderr
		}
	}
	checkRichOutputs(t, &streamed)
}

// In a session each call has its own outputs, numbered afresh, and its
// execute_result carries the call's execution_count.
func TestSessionRichOutputs(t *testing.T) {
	d := startSessionDaemon(t, 0)
	s := newSession(t, d, api.SessionCreateRequest{})
	r := mustExec(t, d, s.SessionID, "class H:\n    def _repr_html_(self): return '<p>1</p>'\ndisplay(H())\nH()\n", api.SessionExecuteRequest{LastLineInteractive: ptr(true)})
	if got := outputKinds(r.Outputs); !slices.Equal(got, []string{"display_data:text/html,text/plain", "execute_result:text/html,text/plain"}) {
		t.Fatalf("call 1 outputs %q (%s)", got, r.Stderr)
	}
	if c := r.Outputs[1].ExecutionCount; c == nil || *c != 1 || r.Outputs[0].ExecutionCount != nil {
		t.Errorf("execution_count %v", c)
	}
	r = mustExec(t, d, s.SessionID, "display(H(), {'text/markdown': '*2*'}, raw=False)\n")
	if got := outputKinds(r.Outputs); !slices.Equal(got, []string{"display_data:text/html,text/plain", "display_data:text/plain"}) {
		t.Fatalf("call 2 outputs %q (%s)", got, r.Stderr)
	}
	// A plain value: execute_result with text/plain only, as result.
	r = mustExec(t, d, s.SessionID, "6 * 7\n", api.SessionExecuteRequest{LastLineInteractive: ptr(true)})
	if got := outputKinds(r.Outputs); !slices.Equal(got, []string{"execute_result:text/plain"}) || outputText(t, r.Outputs[0], "text/plain") != "42" || *r.Outputs[0].ExecutionCount != 3 {
		t.Fatalf("call 3 outputs %q", got)
	}
	deleteSession(t, d, s.SessionID)
}
