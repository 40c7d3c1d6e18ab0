package k8stest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/jaild/jaild/internal/config"
)

// Paths from this module's directory.
const (
	repoDir   = "../../.."
	plainDir  = ".."                 // deploy/kubernetes: what `kubectl apply -f` applies
	exampleGl = "../examples/*.yaml" // kept out of that directory
	chartDir  = "../../helm/jaild"
)

// objects is one deployment's objects, decoded strictly, each kind at most
// once (the manifests hold one of each).
type objects struct {
	from      string // for messages: "deploy/kubernetes", "chart (tls on)"
	namespace *corev1.Namespace
	configMap *corev1.ConfigMap
	secret    *corev1.Secret
	daemonSet *appsv1.DaemonSet
	service   *corev1.Service
	pdb       *policyv1.PodDisruptionBudget
	// cfg is the ConfigMap's jaild.toml as jaild's loader reads it.
	cfg config.Config
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decodeAll decodes every YAML document of data strictly into its typed
// object: a field the type does not have, a field given twice, a value of
// the wrong type or a kind other than the manifests' fails.
func decodeAll(t *testing.T, name string, data []byte, into *objects) {
	t.Helper()
	for i, doc := range docSep.Split(string(data), -1) {
		var probe map[string]any
		if err := yaml.Unmarshal([]byte(doc), &probe); err != nil {
			t.Fatalf("%s: document %d: %v", name, i, err)
		}
		if len(probe) == 0 {
			continue // comments only
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("%s: document %d: %v", name, i, err)
		}
		var target any
		switch gvk := tm.APIVersion + " " + tm.Kind; gvk {
		case "v1 Namespace":
			into.namespace = once(t, name, into.namespace, &corev1.Namespace{})
			target = into.namespace
		case "v1 ConfigMap":
			into.configMap = once(t, name, into.configMap, &corev1.ConfigMap{})
			target = into.configMap
		case "v1 Secret":
			into.secret = once(t, name, into.secret, &corev1.Secret{})
			target = into.secret
		case "v1 Service":
			into.service = once(t, name, into.service, &corev1.Service{})
			target = into.service
		case "apps/v1 DaemonSet":
			into.daemonSet = once(t, name, into.daemonSet, &appsv1.DaemonSet{})
			target = into.daemonSet
		case "policy/v1 PodDisruptionBudget":
			into.pdb = once(t, name, into.pdb, &policyv1.PodDisruptionBudget{})
			target = into.pdb
		default:
			t.Fatalf("%s: document %d: unexpected object %q", name, i, gvk)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), target); err != nil {
			t.Fatalf("%s: document %d (%s): strict decoding: %v", name, i, tm.Kind, err)
		}
	}
}

func once[T any](t *testing.T, name string, have *T, fresh *T) *T {
	t.Helper()
	if have != nil {
		t.Fatalf("%s: a second %T", name, fresh)
	}
	return fresh
}

// loadConfig reads the ConfigMap's jaild.toml with jaild's own loader
// (unknown keys and bad values fail, as they stop the daemon's start).
func (o *objects) loadConfig(t *testing.T) {
	t.Helper()
	if o.configMap == nil {
		t.Fatalf("%s: no ConfigMap", o.from)
	}
	toml, ok := o.configMap.Data["jaild.toml"]
	if !ok || len(o.configMap.Data) != 1 {
		t.Fatalf("%s: the ConfigMap must hold jaild.toml alone, has %v", o.from, keys(o.configMap.Data))
	}
	p := filepath.Join(t.TempDir(), "jaild.toml")
	if err := os.WriteFile(p, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p, true)
	if err != nil {
		t.Fatalf("%s: jaild does not load its jaild.toml: %v\n%s", o.from, err, toml)
	}
	o.cfg = cfg
}

// plainManifests decodes deploy/kubernetes/*.yaml, and the example Secret
// beside them.
func plainManifests(t *testing.T) *objects {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(plainDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", plainDir, err)
	}
	examples, _ := filepath.Glob(exampleGl)
	if len(examples) != 1 {
		t.Fatalf("want the one example Secret in %s, got %v", exampleGl, examples)
	}
	o := &objects{from: "deploy/kubernetes"}
	for _, f := range append(files, examples...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		decodeAll(t, f, b, o)
	}
	o.loadConfig(t)
	return o
}

// values parses Helm values as `helm install -f` does.
func values(t *testing.T, y string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValues([]byte(y))
	if err != nil {
		t.Fatalf("values: %v\n%s", err, y)
	}
	return v
}

// renderChart renders the chart as `helm install --dry-run` without a
// cluster (`helm template`) does: the values schema, the templates, their
// fail calls. The release is "jaild" in namespace "jaild".
func renderChart(t *testing.T, vals string) (string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load the chart: %v", err)
	}
	inst := action.NewInstall(&action.Configuration{Log: t.Logf})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = "jaild", "jaild"
	inst.KubeVersion = kubeVersion(t)
	rel, err := inst.Run(ch, values(t, vals))
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// chartObjects renders the chart with vals and decodes what it rendered.
func chartObjects(t *testing.T, from, vals string) *objects {
	t.Helper()
	out, err := renderChart(t, vals)
	if err != nil {
		t.Fatalf("%s: render: %v", from, err)
	}
	o := &objects{from: from}
	decodeAll(t, from, []byte(out), o)
	o.loadConfig(t)
	return o
}

// kubeVersion is the oldest Kubernetes the chart claims (its Chart.yaml's
// kubeVersion): the render and the lint are for it. (Without one, the SDK
// assumes the version its caller was built to report, 1.20 in a test.)
func kubeVersion(t *testing.T) *chartutil.KubeVersion {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^>=(\d+)\.(\d+)\.0-0$`).FindStringSubmatch(ch.Metadata.KubeVersion)
	if m == nil {
		t.Fatalf("Chart.yaml: kubeVersion %q is not >=MAJOR.MINOR.0-0", ch.Metadata.KubeVersion)
	}
	return &chartutil.KubeVersion{Version: "v" + m[1] + "." + m[2] + ".0", Major: m[1], Minor: m[2]}
}

// lintChart runs `helm lint --strict`: any message above info fails.
func lintChart(t *testing.T, vals string) {
	t.Helper()
	l := lint.AllWithKubeVersion(chartDir, values(t, vals), "jaild", kubeVersion(t))
	for _, m := range l.Messages {
		if m.Severity > support.InfoSev {
			t.Errorf("helm lint: %s", m)
		} else {
			t.Logf("helm lint: %s", m)
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// asJSON is an object as JSON with sorted keys, for comparisons whose
// failure shows the difference.
func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var generic any
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(generic); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// lineDiff names the first lines where a and b differ.
func lineDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < max(len(la), len(lb)); i++ {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n  - %s\n  + %s", i+1, x, y)
		}
	}
	return ""
}
