package k8stest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// kubeToolsEnv names the directory that holds etcd, kube-apiserver and
// kubectl: what `make kube-tools` (kube/fetch.sh) builds and caches.
const kubeToolsEnv = "JAILD_KUBE_TOOLS"

// A real kube-apiserver (with etcd; no kubelet, no controllers) judges what
// `kubectl apply` would send it: the plain manifests, the chart rendered
// with its defaults and with TLS on, and the example TLS Secret (its
// placeholders filled with a real certificate and key: as shipped they
// draw the server's warning that they are not PEM), each with
// `kubectl apply --dry-run=server --validate=strict --warnings-as-errors`
// in the namespace jaild, whose Pod Security labels (privileged) are
// applied for real first. The server's validation, defaulting and admission
// (Pod Security included) run in full; nothing is stored. The pod the
// DaemonSet would make is dry-run created too: Pod Security enforces on
// pods, and only warns on the workloads that make them. Controls show that
// the judge judges: an unknown field, a DaemonSet whose selector misses its
// pods, and jaild's DaemonSet (a warning) and pod (refused outright) in a
// namespace at the restricted level all fail.
func TestAPIServerDryRun(t *testing.T) {
	dir := os.Getenv(kubeToolsEnv)
	if dir == "" {
		t.Fatalf("%s is not set: it names the directory with etcd, kube-apiserver and kubectl; run `make kube-tools` (it prints the directory) and set it", kubeToolsEnv)
	}
	for _, bin := range []string{"etcd", "kube-apiserver", "kubectl"} {
		if fi, err := os.Stat(filepath.Join(dir, bin)); err != nil || fi.Mode()&0o111 == 0 {
			t.Fatalf("%s=%s: no executable %s (%v): run `make kube-tools`", kubeToolsEnv, dir, bin, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "VERSIONS")); err == nil {
		t.Logf("%s:\n%s", filepath.Join(dir, "VERSIONS"), strings.TrimSpace(string(b)))
	}
	c := startCluster(t, dir)
	for _, argv := range [][]string{{"etcd", "--version"}, {"kube-apiserver", "--version"}} {
		out, err := exec.Command(filepath.Join(dir, argv[0]), argv[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", argv, err, out)
		}
		t.Logf("%s", strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", "; "))
	}
	// The client's and the server's versions (kubectl may warn about the
	// skew between them: logged, not judged).
	out, _ := c.kubectl(t, "version")
	t.Logf("kubectl version: %s", strings.ReplaceAll(strings.TrimSpace(out), "\n", "; "))

	// The namespace for real, as docs/DEPLOY.md's step 2 does (objects
	// dry-run into a namespace need it to exist), with the default service
	// account the controller manager would add (pods name it).
	ns := filepath.Join(plainDir, "00-namespace.yaml")
	c.mustApply(t, "the namespace", "apply", "-f", ns)
	c.mustApply(t, "the namespace's default service account", "-n", "jaild", "create", "serviceaccount", "default")

	tmp := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	chartDefaults, err := renderChart(t, defaultValues)
	if err != nil {
		t.Fatal(err)
	}
	chartTLS, err := renderChart(t, tlsValues)
	if err != nil {
		t.Fatal(err)
	}
	examples, _ := filepath.Glob(exampleGl)
	if len(examples) != 1 {
		t.Fatalf("want the one example Secret in %s, got %v", exampleGl, examples)
	}
	secret := c.filledSecret(t, examples[0])
	plain := plainManifests(t)
	podYAML := func(ns string) string {
		t.Helper()
		pod := corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: "jaild-node-a", Namespace: ns, Labels: plain.daemonSet.Spec.Template.Labels},
			Spec:       plain.daemonSet.Spec.Template.Spec,
		}
		b, err := yaml.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	// Accepted, with no warning.
	for _, tc := range []struct {
		name string
		file string
	}{
		{"deploy/kubernetes/ (kubectl apply -f deploy/kubernetes/)", plainDir},
		{"the chart with its defaults", write("chart-defaults.yaml", chartDefaults)},
		{"the chart with TLS on", write("chart-tls.yaml", chartTLS)},
		{"the example TLS Secret, its placeholders filled", write("tls-secret.yaml", secret)},
		{"the DaemonSet's pod", write("pod.yaml", podYAML("jaild"))},
	} {
		out := c.mustApply(t, tc.name, "-n", "jaild", "apply", "--dry-run=server", "--validate=strict", "--warnings-as-errors", "-f", tc.file)
		t.Logf("%s: accepted:\n%s", tc.name, strings.TrimSpace(out))
	}

	// Controls: each refused, for the reason it was made to be.
	ds, err := os.ReadFile(filepath.Join(plainDir, "20-daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	unknownField := strings.Replace(string(ds), "          imagePullPolicy: IfNotPresent\n",
		"          imagePullPolicy: IfNotPresent\n          imagePullPolicyy: Always\n", 1)
	if unknownField == string(ds) {
		t.Fatal("20-daemonset.yaml: no `imagePullPolicy: IfNotPresent` line to add a misspelt field beside")
	}
	var mismatched appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(ds, &mismatched); err != nil {
		t.Fatal(err)
	}
	mismatched.Name = "jaild-mismatched"
	mismatched.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "not-jaild"}}
	b, err := yaml.Marshal(mismatched)
	if err != nil {
		t.Fatal(err)
	}
	// A namespace at the restricted level, which enforces on pods and
	// warns on the workloads that make them.
	c.mustApply(t, "the restricted namespace", "apply", "-f", write("restricted.yaml", `apiVersion: v1
kind: Namespace
metadata:
  name: restricted
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
    pod-security.kubernetes.io/warn: restricted
    pod-security.kubernetes.io/warn-version: latest
`))
	c.mustApply(t, "the restricted namespace's default service account", "-n", "restricted", "create", "serviceaccount", "default")
	for _, tc := range []struct {
		name, ns, file string
		want           []string
	}{
		{"an unknown field (strict validation)", "jaild", write("unknown-field.yaml", unknownField),
			[]string{`unknown field "spec.template.spec.containers[0].imagePullPolicyy"`}},
		{"a selector that misses the pods' labels", "jaild", write("mismatched.yaml", string(b)),
			[]string{"does not match template `labels`"}},
		{"the DaemonSet in a restricted namespace (Pod Security warns)", "restricted",
			write("ds-restricted.yaml", strings.Replace(string(ds), "namespace: jaild", "namespace: restricted", 1)),
			[]string{`would violate PodSecurity "restricted:latest"`, "privileged=true", `restricted volume type "hostPath"`}},
		{"the DaemonSet's pod in a restricted namespace (Pod Security enforces)", "restricted", write("pod-restricted.yaml", podYAML("restricted")),
			[]string{`forbidden: violates PodSecurity "restricted:latest"`, "privileged=true", `restricted volume type "hostPath"`}},
		// Not a fault of the example: what its placeholders draw, and all.
		{"the example TLS Secret as shipped (placeholders, not PEM)", "jaild", examples[0],
			[]string{"Warning: tls: failed to find any PEM data in certificate input\nsecret/jaild-tls created (server dry run)\nerror: 1 warning received"}},
	} {
		out, err := c.kubectl(t, "-n", tc.ns, "apply", "--dry-run=server", "--validate=strict", "--warnings-as-errors", "-f", tc.file)
		if err == nil {
			t.Errorf("control %s: accepted, want refused:\n%s", tc.name, out)
			continue
		}
		missing := false
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("control %s: refused (%v), but the message lacks %q:\n%s", tc.name, err, w, out)
				missing = true
			}
		}
		if !missing {
			t.Logf("control %s: refused: %s", tc.name, strings.TrimSpace(out))
		}
	}
	// The dry runs stored nothing.
	if out, err := c.kubectl(t, "get", "daemonsets,configmaps,services,secrets,poddisruptionbudgets,pods", "-A", "-l", "app.kubernetes.io/name=jaild", "-o", "name"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("after the dry runs: %v\n%s", err, out)
	}
}

// cluster is an etcd and a kube-apiserver on 127.0.0.1, and a kubeconfig
// whose user is in system:masters.
type cluster struct {
	kubectlBin string
	kubeconfig string
	home       string
	pki        *pki
}

// placeholder is a PEM block of the example Secret that holds no PEM data
// (the API server warns of a kubernetes.io/tls Secret whose tls.crt and
// tls.key are not a key pair, so the placeholders would fail the dry run).
var placeholder = regexp.MustCompile(`(?m)^( +)-----BEGIN [A-Z ]+-----\n +REPLACE with (the [^\n]+)\n +-----END [A-Z ]+-----\n`)

// filledSecret is the example Secret's text with each placeholder replaced
// by a certificate or key of the cluster's PKI, indented alike: the
// daemon's certificate and key (a key pair), the client CA's certificate.
func (c *cluster) filledSecret(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"the daemon's certificate":    c.pki.serverCert,
		"the daemon's private key":    c.pki.serverKey,
		"the client CA's certificate": c.pki.caCert,
	}
	filled := map[string]bool{}
	out := placeholder.ReplaceAllStringFunc(string(b), func(block string) string {
		m := placeholder.FindStringSubmatch(block)
		f, ok := files[m[2]]
		if !ok {
			t.Errorf("%s: an unknown placeholder %q", path, m[2])
			return block
		}
		pemData, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		filled[m[2]] = true
		return m[1] + strings.ReplaceAll(strings.TrimSuffix(string(pemData), "\n"), "\n", "\n"+m[1]) + "\n"
	})
	if len(filled) != len(files) {
		t.Fatalf("%s: filled the placeholders %v, want %v", path, keys(filled), keys(files))
	}
	return out
}

// kubectl runs kubectl against the cluster; it returns the combined output
// and the error of a non-zero exit.
func (c *cluster) kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.kubectlBin, append([]string{"--kubeconfig", c.kubeconfig, "--cache-dir", filepath.Join(c.home, "cache")}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+c.home, "KUBECONFIG="+c.kubeconfig)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// mustApply runs kubectl and fails the test on an error or any warning.
func (c *cluster) mustApply(t *testing.T, what string, args ...string) string {
	t.Helper()
	out, err := c.kubectl(t, args...)
	if err != nil {
		t.Fatalf("%s: kubectl %s: %v\n%s", what, strings.Join(args, " "), err, out)
	}
	if strings.Contains(strings.ToLower(out), "warning") {
		t.Fatalf("%s: kubectl %s: a warning:\n%s", what, strings.Join(args, " "), out)
	}
	return out
}

// startCluster starts etcd and kube-apiserver from dir, each in a temporary
// directory, on ports of 127.0.0.1 picked free just before, and waits until
// both are ready. Both are killed when the test ends (and with the test
// binary, through the parent-death signal).
func startCluster(t *testing.T, dir string) *cluster {
	t.Helper()
	tmp := t.TempDir()
	pki := newPKI(t, tmp)

	etcdClient, etcdPeer := freePort(t), freePort(t)
	etcdURL := "http://127.0.0.1:" + etcdClient
	peerURL := "http://127.0.0.1:" + etcdPeer
	etcd := startProcess(t, filepath.Join(dir, "etcd"), filepath.Join(tmp, "etcd.log"),
		"--name", "jaild-test",
		"--data-dir", filepath.Join(tmp, "etcd-data"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "jaild-test="+peerURL,
		"--log-level", "warn")
	waitReady(t, etcd, http.DefaultClient, etcdURL+"/health", `"health":"true"`)

	port := freePort(t)
	api := startProcess(t, filepath.Join(dir, "kube-apiserver"), filepath.Join(tmp, "kube-apiserver.log"),
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", port,
		"--cert-dir", filepath.Join(tmp, "apiserver-certs"),
		"--tls-cert-file", pki.serverCert, "--tls-private-key-file", pki.serverKey,
		"--client-ca-file", pki.caCert,
		// RBAC; the test's user is in system:masters, which may do anything.
		"--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", pki.saPub,
		"--service-account-signing-key-file", pki.saKey,
		"--service-cluster-ip-range", "10.96.0.0/16",
		// What every cluster that runs privileged pods sets (kubeadm's
		// default); off, the server refuses privileged containers.
		"--allow-privileged=true",
		// No Endpoints for the API server itself: 127.0.0.1 is not an
		// address an Endpoints object may hold.
		"--endpoint-reconciler-type", "none",
		"--profiling=false")

	caPool := x509.NewCertPool()
	caPool.AddCert(pki.ca)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: caPool, Certificates: []tls.Certificate{pki.client},
	}}}
	server := "https://127.0.0.1:" + port
	waitReady(t, api, client, server+"/readyz", "ok")

	home := filepath.Join(tmp, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(home, "kubeconfig")
	if err := os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, certificate-authority: %q}
users:
- name: admin
  user: {client-certificate: %q, client-key: %q}
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
`, server, pki.caCert, pki.clientCert, pki.clientKey), 0o600); err != nil {
		t.Fatal(err)
	}
	return &cluster{kubectlBin: filepath.Join(dir, "kubectl"), kubeconfig: kubeconfig, home: home, pki: pki}
}

// process is a started server and its log.
type process struct {
	name   string
	log    string
	exited chan struct{}
	err    error // once exited is closed
}

// startProcess starts bin with args, its output to logPath. At the test's
// end it is sent SIGTERM, then SIGKILL after 10 s, and waited for.
func startProcess(t *testing.T, bin, logPath string, args ...string) *process {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", bin, err)
	}
	p := &process{name: filepath.Base(bin), log: logPath, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("%s's log (the last 4 KiB):\n%s", p.name, p.tail())
		}
	})
	return p
}

func (p *process) tail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	return string(b[max(0, len(b)-4096):])
}

// waitReady polls url until it answers 200 with a body that holds want,
// for up to 90 s; it fails at once when the process exits.
func waitReady(t *testing.T, p *process, client *http.Client, url, want string) {
	t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < 90*time.Second {
		select {
		case <-p.exited:
			t.Fatalf("%s exited before it was ready: %v\n%s", p.name, p.err, p.tail())
		case <-time.After(250 * time.Millisecond):
		}
		resp, err := client.Get(url)
		if err != nil {
			last = err.Error()
			continue
		}
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		resp.Body.Close()
		last = fmt.Sprintf("%d %s", resp.StatusCode, buf[:n])
		if resp.StatusCode == http.StatusOK && strings.Contains(string(buf[:n]), want) {
			t.Logf("%s ready after %v", p.name, time.Since(start).Round(time.Millisecond))
			return
		}
	}
	t.Fatalf("%s not ready after 90 s: GET %s: %s\n%s", p.name, url, last, p.tail())
}

// freePort is a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// pki is the test cluster's keys and certificates, as files: a CA, the API
// server's serving certificate (127.0.0.1), a client certificate in
// system:masters, and the service account signing key.
type pki struct {
	ca                                  *x509.Certificate
	client                              tls.Certificate
	caCert, serverCert, serverKey       string
	clientCert, clientKey, saKey, saPub string
}

func newPKI(t *testing.T, dir string) *pki {
	t.Helper()
	p := &pki{}
	writePEM := func(name, typ string, der []byte) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	newKey := func(name string) (*ecdsa.PrivateKey, string) {
		t.Helper()
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return k, writePEM(name, "PRIVATE KEY", der)
	}
	now := time.Now()
	caKey, _ := newKey("ca.key")
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "jaild-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	if p.ca, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	p.caCert = writePEM("ca.crt", "CERTIFICATE", der)
	issue := func(name string, tmpl *x509.Certificate) (string, string) {
		t.Helper()
		k, keyPath := newKey(name + ".key")
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return writePEM(name+".crt", "CERTIFICATE", der), keyPath
	}
	p.serverCert, p.serverKey = issue("apiserver", &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	})
	p.clientCert, p.clientKey = issue("admin", &x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "jaild-test-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if p.client, err = tls.LoadX509KeyPair(p.clientCert, p.clientKey); err != nil {
		t.Fatal(err)
	}
	saKey, saKeyPath := newKey("sa.key")
	p.saKey = saKeyPath
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	p.saPub = writePEM("sa.pub", "PUBLIC KEY", pub)
	return p
}
