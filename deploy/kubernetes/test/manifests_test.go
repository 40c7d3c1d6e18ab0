package k8stest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
)

// The chart's values for each variant the tests render. tlsValues is the
// chart set up as deploy/kubernetes is (the comparison of the two uses it).
const (
	defaultValues = ``
	tlsValues     = `
namespace: {create: true}
image: {repository: registry.example/jaild, tag: "0.2.0"}
tls: {enabled: true}
config:
  tls:
    clients: [{name: agent-a}]
`
	// overrideValues moves everything a cluster would: the socket's host
	// directory, tolerations, node selection, resources, no image cache,
	// no file store, a longer grace, a node-local Service.
	overrideValues = `
image: {repository: registry.internal/sandbox/jaild, tag: "1.2.3", pullPolicy: Always}
socket: {hostDir: /var/run/agents/jaild}
tls: {enabled: true, port: 8443, secretName: sandbox-tls}
service: {internalTrafficPolicy: Local, sessionAffinity: None}
imageCache: {enabled: false}
tolerations: [{key: dedicated, operator: Equal, value: sandbox, effect: NoSchedule}]
nodeSelector: {sandbox: "true"}
priorityClassName: system-node-critical
resources: {requests: {cpu: "2", memory: 4Gi}, limits: {memory: 16Gi}}
terminationGracePeriodSeconds: 200
config:
  shutdown_grace: 2m
  files: {enabled: false}
  tls:
    clients: [{name: agent-a}, {name: ci, subject: ci-runner, rate_per_minute: 600}]
`
)

// hostIDLockDir is internal/jail's HostIDLockDir, read from its source so
// that the manifests follow a change there (the jail package needs cgo and
// libcontainer; this module does not build it).
func hostIDLockDir(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoDir, "internal/jail/slots.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^const HostIDLockDir = "([^"]+)"$`).FindSubmatch(src)
	if m == nil {
		t.Fatal("internal/jail/slots.go: no const HostIDLockDir")
	}
	return string(m[1])
}

// Every object of the plain manifests and of each chart variant decodes
// strictly and passes the deployment checks below.
func TestManifests(t *testing.T) {
	t.Parallel()
	variants := []struct {
		o             *objects
		tls, ns       bool
		imageCache    bool
		socketHostDir string
	}{
		{plainManifests(t), true, true, true, "/run/jaild-socket"},
		{chartObjects(t, "chart (defaults)", defaultValues), false, false, true, "/run/jaild-socket"},
		{chartObjects(t, "chart (tls on)", tlsValues), true, true, true, "/run/jaild-socket"},
		{chartObjects(t, "chart (overrides)", overrideValues), true, false, false, "/var/run/agents/jaild"},
	}
	lockDir := hostIDLockDir(t)
	for _, v := range variants {
		t.Run(v.o.from, func(t *testing.T) {
			checkDeployment(t, v.o, v.tls, v.ns, v.imageCache, v.socketHostDir, lockDir)
		})
	}
}

// checkDeployment checks one deployment's objects against each other and
// against the configuration jaild loads from its ConfigMap.
func checkDeployment(t *testing.T, o *objects, tlsOn, wantNS, imageCache bool, socketHostDir, lockDir string) {
	cfg := o.cfg
	ds := o.daemonSet
	if ds == nil || o.configMap == nil || o.pdb == nil {
		t.Fatalf("want a DaemonSet, a ConfigMap and a PodDisruptionBudget, got %+v", o)
	}
	for _, obj := range []interface{ GetNamespace() string }{ds, o.configMap, o.pdb} {
		if obj.GetNamespace() != "jaild" {
			t.Errorf("%T in namespace %q, want jaild", obj, obj.GetNamespace())
		}
	}

	// The namespace admits privileged pods, and only with its labels.
	if wantNS != (o.namespace != nil) {
		t.Fatalf("Namespace rendered: %v, want %v", o.namespace != nil, wantNS)
	}
	if o.namespace != nil {
		l := o.namespace.Labels
		if o.namespace.Name != "jaild" || l["pod-security.kubernetes.io/enforce"] != "privileged" || l["pod-security.kubernetes.io/enforce-version"] != "latest" {
			t.Errorf("Namespace %s: labels %v: Pod Security must enforce the privileged level", o.namespace.Name, l)
		}
	}

	pod := ds.Spec.Template.Spec
	// Selectors: the DaemonSet's own, the Service's and the budget's pick
	// the pods, and nothing but them.
	podLabels := labels.Set(ds.Spec.Template.Labels)
	sel := ds.Spec.Selector
	if sel == nil || len(sel.MatchLabels) == 0 || !labels.SelectorFromSet(sel.MatchLabels).Matches(podLabels) {
		t.Errorf("the DaemonSet's selector %v does not match its pods' labels %v", sel, podLabels)
	}
	if p := o.pdb.Spec.Selector; p == nil || !labels.SelectorFromSet(p.MatchLabels).Matches(podLabels) || len(p.MatchLabels) != len(sel.MatchLabels) {
		t.Errorf("the budget's selector %v is not the DaemonSet's %v", p, sel)
	}
	if mu := o.pdb.Spec.MaxUnavailable; mu == nil || mu.IntValue() != 1 {
		t.Errorf("budget maxUnavailable %v, want 1", mu)
	}
	// Rolling updates never run two daemons on one node.
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ds.Spec.UpdateStrategy.Type != "RollingUpdate" || ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 ||
		ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 1 {
		t.Errorf("update strategy %+v: want RollingUpdate, maxUnavailable 1, maxSurge 0", ds.Spec.UpdateStrategy)
	}

	// Privileges: the one container, privileged; nothing of the host's
	// but the volumes below.
	if pod.HostNetwork || pod.HostPID || pod.HostIPC || pod.ShareProcessNamespace != nil && *pod.ShareProcessNamespace {
		t.Errorf("the pod shares the host's network %v, PIDs %v or IPC %v", pod.HostNetwork, pod.HostPID, pod.HostIPC)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token; jaild never calls the Kubernetes API")
	}
	if len(pod.InitContainers) != 0 || len(pod.EphemeralContainers) != 0 || len(pod.Containers) != 1 || pod.Containers[0].Name != "jaild" {
		t.Fatalf("want one container, jaild, and no others: %d init, %d containers", len(pod.InitContainers), len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Fatal("the jaild container is not privileged: it cannot make namespaces, loop mounts or cgroups")
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeUnconfined {
		t.Errorf("seccomp profile %v: a runtime filter would stack on every jail's", sc.SeccompProfile)
	}
	if sc.Capabilities != nil || sc.AllowPrivilegeEscalation != nil || sc.ProcMount != nil {
		t.Errorf("security context %+v: privileged says it all; capabilities would be ignored", sc)
	}
	if !slices.Equal(c.Args, []string{"--config", "/etc/jaild/config/jaild.toml"}) || len(c.Command) != 0 {
		t.Errorf("command %q args %q: want the image's entrypoint with --config /etc/jaild/config/jaild.toml", c.Command, c.Args)
	}
	if strings.HasPrefix(c.TerminationMessagePath, "/dev/") || c.TerminationMessagePath == "" {
		t.Errorf("terminationMessagePath %q: /dev is the node's in this pod", c.TerminationMessagePath)
	}
	if name := c.Image[strings.LastIndex(c.Image, "/")+1:]; !strings.Contains(name, ":") || strings.HasSuffix(name, ":") {
		t.Errorf("image %q has no tag", c.Image)
	}
	if pod.NodeSelector["kubernetes.io/arch"] != "amd64" || pod.NodeSelector["kubernetes.io/os"] != "linux" {
		t.Errorf("node selector %v: the image is linux/amd64 only", pod.NodeSelector)
	}

	// Volumes: every mount has its volume and every volume its mount; the
	// host paths are exactly these, each mounted at its own path.
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		if _, ok := vols[m.Name]; !ok {
			t.Errorf("mount %s at %s: no such volume", m.Name, m.MountPath)
		}
		mounts[m.Name] = m
	}
	for name := range vols {
		if _, ok := mounts[name]; !ok {
			t.Errorf("volume %s is mounted nowhere", name)
		}
	}
	wantHost := map[string]corev1.HostPathType{
		socketHostDir: corev1.HostPathDirectoryOrCreate,
		lockDir:       corev1.HostPathDirectoryOrCreate,
		"/dev":        corev1.HostPathDirectory,
	}
	if imageCache {
		wantHost["/var/cache/jaild/rootfs"] = corev1.HostPathDirectoryOrCreate
	}
	gotHost := map[string]corev1.HostPathType{}
	for _, v := range pod.Volumes {
		if v.HostPath == nil {
			continue
		}
		if v.HostPath.Type == nil {
			t.Errorf("hostPath %s has no type", v.HostPath.Path)
			continue
		}
		gotHost[v.HostPath.Path] = *v.HostPath.Type
		if m := mounts[v.Name]; filepath.Clean(m.MountPath) != filepath.Clean(v.HostPath.Path) {
			t.Errorf("hostPath %s is mounted at %s: jaild's paths are the node's", v.HostPath.Path, m.MountPath)
		}
		if want := v.HostPath.Path == "/var/cache/jaild/rootfs"; mounts[v.Name].ReadOnly != want {
			t.Errorf("hostPath %s mounted read-only: %v, want %v", v.HostPath.Path, mounts[v.Name].ReadOnly, want)
		}
	}
	if fmt.Sprint(gotHost) != fmt.Sprint(wantHost) {
		t.Errorf("hostPath volumes %v, want %v", gotHost, wantHost)
	}
	if filepath.Dir(cfg.Socket) != socketHostDir {
		t.Errorf("socket %s is not in the node's directory %s", cfg.Socket, socketHostDir)
	}

	// The configuration: mounted where the args say, from this ConfigMap.
	if v := vols["config"]; v.ConfigMap == nil || v.ConfigMap.Name != o.configMap.Name || mounts["config"].MountPath != "/etc/jaild/config" || !mounts["config"].ReadOnly {
		t.Errorf("config volume %+v mounted %+v: want ConfigMap %s read-only at /etc/jaild/config", v, mounts["config"], o.configMap.Name)
	}
	// The file store's directory is an emptyDir of the pod.
	if cfg.Files.Enabled {
		if v := vols["files"]; v.EmptyDir == nil || mounts["files"].MountPath != cfg.Files.Dir {
			t.Errorf("files.dir %s: want an emptyDir mounted there, got %+v at %s", cfg.Files.Dir, v, mounts["files"].MountPath)
		}
	} else if _, ok := vols["files"]; ok {
		t.Error("a files volume with the file store off")
	}

	// TLS: the listener's port is the container's and the Service's, its
	// files are the Secret's keys where the Secret is mounted.
	if tlsOn {
		_, port, err := net.SplitHostPort(cfg.TLS.Listen)
		if err != nil {
			t.Fatalf("tls.listen %q: %v", cfg.TLS.Listen, err)
		}
		if len(c.Ports) != 1 || c.Ports[0].Name != "tls" || strconv.Itoa(int(c.Ports[0].ContainerPort)) != port || c.Ports[0].Protocol != corev1.ProtocolTCP {
			t.Errorf("container ports %+v: want tls = %s (tls.listen %s)", c.Ports, port, cfg.TLS.Listen)
		}
		sec := vols["tls"].Secret
		dir := mounts["tls"].MountPath
		if sec == nil || !mounts["tls"].ReadOnly || sec.DefaultMode == nil || *sec.DefaultMode != 0o400 {
			t.Fatalf("tls volume %+v mounted %+v: want a Secret, read-only, mode 0400", vols["tls"], mounts["tls"])
		}
		for key, p := range map[string]string{"tls.crt": cfg.TLS.Cert, "tls.key": cfg.TLS.Key, "ca.crt": cfg.TLS.ClientCA} {
			if p != filepath.Join(dir, key) {
				t.Errorf("%s is %s: want the Secret's %s at %s", key, p, key, filepath.Join(dir, key))
			}
		}
		if o.secret != nil {
			if o.secret.Name != sec.SecretName || o.secret.Type != corev1.SecretTypeTLS || fmt.Sprint(keys(o.secret.StringData)) != "[ca.crt tls.crt tls.key]" {
				t.Errorf("the example Secret %s (%s, keys %v): want %s, kubernetes.io/tls, ca.crt tls.crt tls.key", o.secret.Name, o.secret.Type, keys(o.secret.StringData), sec.SecretName)
			}
		}
		svc := o.service
		if svc == nil {
			t.Fatal("TLS on and no Service")
		}
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) || len(svc.Spec.Selector) == 0 {
			t.Errorf("the Service's selector %v does not pick the pods %v", svc.Spec.Selector, podLabels)
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "tls" || svc.Spec.Type != corev1.ServiceTypeClusterIP {
			t.Errorf("Service %+v: want ClusterIP, one port to the container's tls port", svc.Spec)
		}
		if len(cfg.TLS.Clients) == 0 {
			t.Error("TLS on without a client")
		}
	} else {
		if cfg.TLS.Listen != "" || o.service != nil || len(c.Ports) != 0 {
			t.Errorf("TLS off, yet listen %q, Service %v, ports %v", cfg.TLS.Listen, o.service != nil, c.Ports)
		}
		if _, ok := vols["tls"]; ok {
			t.Error("TLS off, yet a tls volume")
		}
	}

	// Draining: SIGTERM comes after the preStop pause; the pod then has
	// shutdown_grace for its runs and the daemon's teardown (up to 30 s
	// more: cmd/jaild's shutdown) before the kubelet kills it.
	var pause time.Duration
	if l := c.Lifecycle; l != nil && l.PreStop != nil {
		if l.PreStop.Exec == nil || len(l.PreStop.Exec.Command) != 2 || l.PreStop.Exec.Command[0] != "sleep" {
			t.Fatalf("preStop %+v: want sleep N", l.PreStop)
		}
		n, err := strconv.Atoi(l.PreStop.Exec.Command[1])
		if err != nil {
			t.Fatal(err)
		}
		pause = time.Duration(n) * time.Second
	}
	if pod.TerminationGracePeriodSeconds == nil {
		t.Fatal("no terminationGracePeriodSeconds")
	}
	grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	if grace <= cfg.ShutdownGrace.Duration || grace < pause+cfg.ShutdownGrace.Duration+cfg.Sessions.ShutdownPause.Duration+30*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v: want at least preStop %v + shutdown_grace %v + sessions.shutdown_pause %v + 30 s", grace, pause, cfg.ShutdownGrace.Duration, cfg.Sessions.ShutdownPause.Duration)
	}

	// Probes: exec, curl over the configured socket, readiness on
	// /v1/ready, liveness and start-up on /v1/health, each with a timeout
	// above curl's own.
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"startup", c.StartupProbe, "/v1/health"}, {"liveness", c.LivenessProbe, "/v1/health"}, {"readiness", c.ReadinessProbe, "/v1/ready"}} {
		if p.probe == nil || p.probe.Exec == nil || p.probe.HTTPGet != nil || p.probe.TCPSocket != nil || p.probe.GRPC != nil {
			t.Errorf("%s probe %+v: want an exec probe", p.name, p.probe)
			continue
		}
		if want := probeCommand(cfg.Socket, p.path); !slices.Equal(p.probe.Exec.Command, want) {
			t.Errorf("%s probe runs %q, want %q", p.name, p.probe.Exec.Command, want)
		}
		if p.probe.TimeoutSeconds <= curlMaxTime || p.probe.PeriodSeconds < 1 || p.probe.FailureThreshold < 1 {
			t.Errorf("%s probe: timeout %ds (curl gives up after %ds), period %ds, threshold %d", p.name, p.probe.TimeoutSeconds, curlMaxTime, p.probe.PeriodSeconds, p.probe.FailureThreshold)
		}
	}
	if s := c.StartupProbe; s != nil && time.Duration(s.PeriodSeconds*s.FailureThreshold)*time.Second < 2*time.Minute {
		t.Errorf("the start-up probe gives up after %ds: the image's digest check and the first warm jails take longer on a slow node", s.PeriodSeconds*s.FailureThreshold)
	}

	// Resources: requests within limits, no CPU limit (CFS quota would
	// throttle every jail together).
	req, lim := c.Resources.Requests, c.Resources.Limits
	if _, ok := lim[corev1.ResourceCPU]; ok {
		t.Error("a CPU limit")
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := req[r]; !ok {
			t.Errorf("no %s request", r)
		}
	}
	if m, ok := lim[corev1.ResourceMemory]; ok && m.Cmp(req[corev1.ResourceMemory]) < 0 {
		t.Errorf("memory limit %s below the request %s", m.String(), req.Memory().String())
	}
	if m, ok := lim[corev1.ResourceMemory]; ok && m.Cmp(*resource.NewQuantity(cfg.Maxima.MemoryMB<<20+cfg.MemoryLimit(), resource.BinarySI)) < 0 {
		t.Errorf("memory limit %s below one run at maxima.memory_mb (%d MiB) plus the daemon's own limit", m.String(), cfg.Maxima.MemoryMB)
	}
}

// curlMaxTime is the probes' curl --max-time, in seconds.
const curlMaxTime = 4

// probeCommand is what every probe runs: a GET over the socket that fails
// (exit 22, the body in the probe's event) on any status but 2xx.
func probeCommand(socket, path string) []string {
	return []string{"curl", "--fail-with-body", "--silent", "--show-error", "--max-time", strconv.Itoa(curlMaxTime),
		"--unix-socket", socket, "http://jaild" + path}
}
