package k8stest

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/jaild/jaild/internal/config"
)

// The chart, set up as deploy/kubernetes is, renders the same objects:
// field for field once Helm's own labels and the config checksum are set
// aside, and a jaild.toml that loads to the same configuration.
func TestChartMatchesPlainManifests(t *testing.T) {
	t.Parallel()
	plain := plainManifests(t)
	chart := chartObjects(t, "chart (tls on)", tlsValues)
	if !reflect.DeepEqual(plain.cfg, chart.cfg) {
		t.Errorf("jaild.toml loads differently:\n%s", lineDiff(asJSON(t, plain.cfg), asJSON(t, chart.cfg)))
	}
	helmOnly := func(m map[string]string) {
		for _, k := range []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/version", "checksum/config"} {
			delete(m, k)
		}
	}
	for _, o := range []*objects{plain, chart} {
		helmOnly(o.configMap.Labels)
		helmOnly(o.daemonSet.Labels)
		helmOnly(o.daemonSet.Spec.Template.Annotations)
		if len(o.daemonSet.Spec.Template.Annotations) == 0 {
			o.daemonSet.Spec.Template.Annotations = nil
		}
		helmOnly(o.service.Labels)
		helmOnly(o.pdb.Labels)
		o.configMap.Data = nil // compared above as jaild loads it
	}
	for _, pair := range []struct {
		name         string
		plain, chart any
	}{
		{"Namespace", plain.namespace, chart.namespace},
		{"ConfigMap", plain.configMap, chart.configMap},
		{"DaemonSet", plain.daemonSet, chart.daemonSet},
		{"Service", plain.service, chart.service},
		{"PodDisruptionBudget", plain.pdb, chart.pdb},
	} {
		if a, b := asJSON(t, pair.plain), asJSON(t, pair.chart); a != b {
			t.Errorf("%s: deploy/kubernetes (-) and the chart (+) differ at %s", pair.name, lineDiff(a, b))
		}
	}
	if chart.secret != nil {
		t.Error("the chart renders a Secret: TLS keys do not belong in values")
	}
}

// What the values move lands where it should.
func TestChartValues(t *testing.T) {
	t.Parallel()
	o := chartObjects(t, "chart (overrides)", overrideValues)
	pod := o.daemonSet.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Image != "registry.internal/sandbox/jaild:1.2.3" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %s %s", c.Image, c.ImagePullPolicy)
	}
	if len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "dedicated" || pod.Tolerations[0].Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("tolerations %+v", pod.Tolerations)
	}
	if pod.NodeSelector["sandbox"] != "true" || pod.PriorityClassName != "system-node-critical" {
		t.Errorf("node selector %v, priority class %q", pod.NodeSelector, pod.PriorityClassName)
	}
	if c.Resources.Requests.Cpu().String() != "2" || c.Resources.Limits.Memory().String() != "16Gi" {
		t.Errorf("resources %+v", c.Resources)
	}
	if *pod.TerminationGracePeriodSeconds != 200 || o.cfg.ShutdownGrace.Duration.Seconds() != 120 {
		t.Errorf("grace %d, shutdown_grace %v", *pod.TerminationGracePeriodSeconds, o.cfg.ShutdownGrace)
	}
	svc := o.service.Spec
	if *svc.InternalTrafficPolicy != corev1.ServiceInternalTrafficPolicyLocal || svc.SessionAffinity != corev1.ServiceAffinityNone || svc.Ports[0].Port != 8443 {
		t.Errorf("service %+v", svc)
	}
	if o.cfg.TLS.Listen != "0.0.0.0:8443" || o.cfg.Socket != "/var/run/agents/jaild/jaild.sock" || o.cfg.Files.Enabled {
		t.Errorf("config: listen %q, socket %q, files %v", o.cfg.TLS.Listen, o.cfg.Socket, o.cfg.Files.Enabled)
	}
	if cl := o.cfg.TLS.Clients; len(cl) != 2 || cl[1].Subject != "ci-runner" || cl[1].RatePerMinute == nil || *cl[1].RatePerMinute != 600 {
		t.Errorf("clients %+v", cl)
	}
	for _, v := range pod.Volumes {
		if v.Name == "tls" && v.Secret.SecretName != "sandbox-tls" {
			t.Errorf("tls volume from %s", v.Secret.SecretName)
		}
	}
}

// config is written as YAML and must reach jaild as the TOML it means:
// integers stay integers (YAML gives Helm float64s), strings keep their
// quotes and non-ASCII, lists, nested tables and lists of tables, and
// null removes a default of the chart.
func TestChartConfigToTOML(t *testing.T) {
	t.Parallel()
	o := chartObjects(t, "chart (a config of every shape)", `
config:
  memory_budget_mb: null
  max_body_bytes: 1073741824
  host_id_base: 4000000000
  read_timeout: 1m30s
  admission: {rate_per_minute: 0.5, burst: 3, daily_quota: 0}
  pool: {size: 1, preimport: [numpy, matplotlib.pyplot]}
  network:
    enabled: true
    allow_hosts: ["example.com", "*.example.com", "198.51.100.0/24:443"]
    dns: ["192.0.2.53:5353"]
  images:
    python-minimal:
      dir: /var/cache/jaild/rootfs/python-minimal/current
      plain_pool_size: 0
      defaults: {memory_mb: 256}
  tls:
    clients:
      - {name: agent-a, admin: true, network: true}
      - {name: ci, subject: "ci \"runner\" ü\\x", burst: 100, daily_quota: 0}
      - {name: mesh, san: "spiffe://example.org/agent/*"}
`)
	c := o.cfg
	if c.MemoryBudgetMB != 0 || c.MaxBodyBytes != 1<<30 || c.HostIDBase != 4_000_000_000 || c.ReadTimeout.Seconds() != 90 {
		t.Errorf("top-level keys: %d %d %d %v", c.MemoryBudgetMB, c.MaxBodyBytes, c.HostIDBase, c.ReadTimeout)
	}
	if c.Admission.RatePerMinute != 0.5 || c.Admission.Burst != 3 || c.Admission.DailyQuota != 0 || c.Admission.MaxConcurrent != 4 {
		t.Errorf("admission %+v", c.Admission)
	}
	if !reflect.DeepEqual(c.Pool.Preimport, []string{"numpy", "matplotlib.pyplot"}) || c.Pool.Size != 1 {
		t.Errorf("pool %+v", c.Pool)
	}
	if !c.Network.Enabled || len(c.Network.AllowHosts) != 3 || c.Network.AllowHosts[1] != "*.example.com" || c.Network.DNS[0] != "192.0.2.53:5353" {
		t.Errorf("network %+v", c.Network)
	}
	im, ok := c.Images["python-minimal"]
	if !ok || im.Dir != "/var/cache/jaild/rootfs/python-minimal/current" || im.PlainPool() != 0 || im.Defaults.MemoryMB != 256 {
		t.Errorf("images %+v", c.Images)
	}
	cl := c.TLS.Clients
	if len(cl) != 3 || !cl[0].Admin || !cl[0].Network || cl[1].Subject != `ci "runner" ü\x` || *cl[1].Burst != 100 || *cl[1].DailyQuota != 0 || cl[2].SAN != "spiffe://example.org/agent/*" {
		t.Errorf("clients %+v", cl)
	}
	// Everything not set is jaild's default or the chart's.
	d := config.Default()
	if c.Sessions != d.Sessions || c.Audit != d.Audit || c.Files.Dir != "/var/lib/jaild/files" || c.CgroupFavorDynmods {
		t.Errorf("defaults moved: sessions %+v audit %+v files %s favordynmods %v", c.Sessions, c.Audit, c.Files.Dir, c.CgroupFavorDynmods)
	}
}

// Values that would deploy something that cannot work are refused when the
// chart renders, with a message that says what to do.
func TestChartRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, values, want string }{
		{"tls without clients", `tls: {enabled: true}`, "at least one client"},
		{"socket in config", `config: {socket: /tmp/x.sock}`, "set that instead"},
		{"tls files in config", "tls: {enabled: true}\nconfig: {tls: {cert: /x.crt, clients: [{name: a}]}}", "config.tls.cert is set by the chart"},
		{"a listener without tls.enabled", `config: {tls: {listen: "0.0.0.0:7443", clients: [{name: a}]}}`, "set tls.enabled"},
		{"a grace the pod does not wait for", `config: {shutdown_grace: 2m}`, "at least 175"},
		{"a duration jaild would not parse", `config: {shutdown_grace: 30}`, "is not a duration"},
		{"a misspelt value", `tolerationz: []`, "tolerationz"},
		{"a probe timeout below curl's", `probes: {readiness: {timeoutSeconds: 2}}`, "timeoutSeconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderChart(t, tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("values %q: got %v, want an error with %q", tc.values, err, tc.want)
			}
		})
	}
}

// helm lint --strict passes, without and with TLS.
func TestChartLint(t *testing.T) {
	t.Parallel()
	lintChart(t, defaultValues)
	lintChart(t, tlsValues)
}
