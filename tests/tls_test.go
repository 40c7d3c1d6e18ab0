package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/daemontest"
	"github.com/jaild/jaild/internal/tlsauth/tlsauthtest"
)

// tlsClient is an HTTPS client of the daemon's TLS listener with leaf's
// certificate.
type tlsClient struct {
	base string
	c    *http.Client
}

func newTLSClient(port int, ca *tlsauthtest.CA, leaf *tlsauthtest.Leaf) *tlsClient {
	return &tlsClient{base: fmt.Sprintf("https://127.0.0.1:%d", port),
		c: &http.Client{Transport: &http.Transport{TLSClientConfig: tlsauthtest.ClientConfig(ca, leaf)}, Timeout: 60 * time.Second}}
}

// try sends a request and returns the status and body, or the transport's
// error (a refused handshake).
func (c *tlsClient) try(method, path, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	resp, err := c.c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// call is try, decoding the JSON answer into out (when not nil).
func (c *tlsClient) call(t *testing.T, method, path, body string, out any) int {
	t.Helper()
	status, data, err := c.try(method, path, body)
	if err != nil {
		t.Fatalf("%s %s over TLS: %v", method, path, err)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s over TLS: HTTP %d, not JSON: %v\n%s", method, path, status, err, data)
		}
	}
	return status
}

// tlsSection is the daemon's [tls] table with the clients named (alice
// with a daily quota of her own).
func tlsSection(port int, cert, key, ca string, clients ...string) string {
	s := fmt.Sprintf("[tls]\nlisten = \"127.0.0.1:%d\"\ncert = %q\nkey = %q\nclient_ca = %q\n", port, cert, key, ca)
	for _, c := range clients {
		s += fmt.Sprintf("[[tls.clients]]\nname = %q\n", c)
		if c == "alice" {
			s += "daily_quota = 20\n"
		}
	}
	return s
}

// TestTLS: a daemon serving its API over mutual TLS runs a real jail for
// a client, jailctl reaches it with --host, a reload (SIGHUP) removes a
// client, and SIGTERM drains the listener: ready says 503, new runs get
// 503, the run in flight finishes.
func TestTLS(t *testing.T) {
	port := freePort(t)
	d, err := prepareDaemon(daemontest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { // stops the daemon if the test has not; removes its directory
		if err := d.Stop(); err != nil {
			t.Error(err)
		}
	}()
	ca := tlsauthtest.NewCA(t, "jaild test CA")
	cert, key := ca.Server(t).Write(t, d.Dir, "server")
	caFile := ca.Write(t, d.Dir, "client-ca.crt")
	aliceLeaf, bobLeaf := ca.Client(t, "alice"), ca.Client(t, "bob")
	bobCert, bobKey := bobLeaf.Write(t, d.Dir, "bob")
	cfgPath := filepath.Join(d.Dir, "jaild.toml")
	base, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, append(bytes.Clone(base), tlsSection(port, cert, key, caFile, "alice", "bob")...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	alice := newTLSClient(port, ca, aliceLeaf)

	// The socket comes up first; the TLS listener right after.
	waitFor(t, 30*time.Second, "the TLS listener", func() bool {
		_, _, err := alice.try("GET", "/v1/health", "")
		return err == nil
	})
	var rd api.Ready
	if status := alice.call(t, "GET", "/v1/ready", "", &rd); status != 200 || rd != (api.Ready{Ready: true}) {
		t.Fatalf("ready: HTTP %d %+v", status, rd)
	}
	var res api.ExecuteResponse
	if status := alice.call(t, "POST", "/v1/execute", `{"code":"print(1)"}`, &res); status != 200 || res.Status != "ok" || res.Stdout != "1\n" {
		t.Fatalf("alice's print(1): HTTP %d %+v", status, res)
	}
	var info api.Info
	alice.call(t, "GET", "/v1/info", "", &info)
	if info.Caller.Client != "alice" || info.Caller.UID != config.TLSClientUID("alice") || info.Caller.QuotaRemaining == nil || *info.Caller.QuotaRemaining != 19 {
		t.Errorf("alice's info: %+v (quota %v), want her uid and her own quota of 20 less 1", info.Caller, info.Caller.QuotaRemaining)
	}
	if !strings.Contains(d.Log.String(), `"client":"alice"`) {
		t.Errorf("no audit line names alice:\n%s", d.Log.String())
	}

	// jailctl with --host and bob's certificate.
	cmd := exec.Command(filepath.Join(binDir, "jailctl"), "--host", alice.base, "--cert", bobCert, "--key", bobKey, "--ca", caFile,
		"exec", "-c", "print(6*7)")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "JAILD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil || out.String() != "42\n" {
		t.Errorf("jailctl --host exec: %v, stdout %q, stderr %q", err, out.String(), errOut.String())
	}

	// The Python client (clients/python) over mTLS with bob's certificate.
	py := exec.Command("/usr/bin/python3", "-B", "-c", `import sys; sys.path.insert(0, "../clients/python"); import jaild
c = jaild.Client(host=sys.argv[1], cert=sys.argv[2], key=sys.argv[3], ca=sys.argv[4])
print(c.execute("print(6*7)").stdout, c.info()["caller"]["client"], end="")`, alice.base, bobCert, bobKey, caFile)
	if pyOut, err := py.CombinedOutput(); err != nil || string(pyOut) != "42\n bob" {
		t.Errorf("the Python client over mTLS: %v, output %q", err, pyOut)
	}
	// And the TypeScript one (clients/typescript).
	tsClient, _ := filepath.Abs("../clients/typescript/index.js")
	js := exec.Command(filepath.Join(nodeDir(t), "node"), "--input-type=module", "-e", `const { Client } = await import(process.argv[1]);
const c = new Client({ host: process.argv[2], cert: process.argv[3], key: process.argv[4], ca: process.argv[5] });
process.stdout.write((await c.execute("print(6*7)")).stdout + (await c.info()).caller.client);`, "file://"+tsClient, alice.base, bobCert, bobKey, caFile)
	if jsOut, err := js.CombinedOutput(); err != nil || string(jsOut) != "42\nbob" {
		t.Errorf("the TypeScript client over mTLS: %v, output %q", err, jsOut)
	}

	// SIGHUP without bob: his open connection gets 403, a new one is
	// refused; alice goes on.
	bob := newTLSClient(port, ca, bobLeaf)
	if status := bob.call(t, "GET", "/v1/info", "", nil); status != 200 {
		t.Fatalf("bob before the reload: HTTP %d", status)
	}
	if err := os.WriteFile(cfgPath, append(bytes.Clone(base), tlsSection(port, cert, key, caFile, "alice")...), 0o644); err != nil {
		t.Fatal(err)
	}
	before := strings.Count(d.Log.String(), `"msg":"reload`)
	if err := d.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the reload", func() bool { return strings.Count(d.Log.String(), `"msg":"reload`) > before })
	if !strings.Contains(d.Log.String(), `"msg":"reloaded"`) {
		t.Fatalf("the reload failed:\n%s", d.Log.String())
	}
	var eb api.ErrorBody
	if status := bob.call(t, "GET", "/v1/info", "", &eb); status != 403 || eb.Error.Type != "forbidden" {
		t.Errorf("bob after his removal, on his open connection: HTTP %d %+v", status, eb)
	}
	if status, _, err := newTLSClient(port, ca, bobLeaf).try("GET", "/v1/info", ""); err == nil {
		t.Errorf("bob after his removal, on a new connection: HTTP %d, want a refused handshake", status)
	}
	if status := newTLSClient(port, ca, aliceLeaf).call(t, "GET", "/v1/info", "", nil); status != 200 {
		t.Errorf("alice after bob's removal, on a new connection: HTTP %d", status)
	}

	// SIGTERM with a 3 s run in flight.
	type answer struct {
		status int
		data   []byte
		err    error
	}
	inflight := make(chan answer, 1)
	go func() {
		s, b, err := alice.try("POST", "/v1/execute", `{"code":"import time\ntime.sleep(3)\nprint('slept')","limits":{"timeout_ms":20000}}`)
		inflight <- answer{s, b, err}
	}()
	waitFor(t, 20*time.Second, "the run to start", func() bool {
		var info api.Info
		alice.call(t, "GET", "/v1/info", "", &info)
		return info.Capacity.Running == 1
	})
	if err := d.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "ready to say 503", func() bool {
		status, _, err := alice.try("GET", "/v1/ready", "")
		return err == nil && status == 503
	})
	rd = api.Ready{}
	if status := alice.call(t, "GET", "/v1/ready", "", &rd); status != 503 || rd != (api.Ready{Reason: "draining: the daemon is stopping"}) {
		t.Errorf("ready while draining: HTTP %d %+v", status, rd)
	}
	eb = api.ErrorBody{}
	if status := newTLSClient(port, ca, aliceLeaf).call(t, "POST", "/v1/execute", `{"code":"print(2)"}`, &eb); status != 503 ||
		eb.Error.Type != "unavailable" || !strings.Contains(eb.Error.Message, "the daemon is stopping") {
		t.Errorf("a new run while draining: HTTP %d %+v", status, eb)
	}
	select {
	case a := <-inflight:
		t.Fatalf("the run in flight ended before the drain was checked: %d %s %v", a.status, a.data, a.err)
	default:
	}
	a := <-inflight
	res = api.ExecuteResponse{}
	if a.err != nil || json.Unmarshal(a.data, &res) != nil || a.status != 200 || res.Status != "ok" || res.Stdout != "slept\n" {
		t.Errorf("the run in flight: HTTP %d %s %v", a.status, a.data, a.err)
	}

	done := make(chan error, 1)
	go func() { done <- d.WaitExit() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the daemon exited with %v after SIGTERM\n%s", err, d.Log.String())
		}
	case <-time.After(60 * time.Second):
		_ = d.Cmd.Process.Kill()
		<-done
		t.Fatalf("the daemon did not exit after the drain\n%s", d.Log.String())
	}
	if _, _, err := alice.try("GET", "/v1/health", ""); err == nil {
		t.Error("the TLS listener still answers after the daemon exited")
	}
}
