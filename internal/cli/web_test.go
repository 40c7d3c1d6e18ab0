package cli

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestWebWiring serves the playground on a free loopback port: the URL
// printed on stdout opens the page itself (no redirect, no cookie), the
// URL without the token does not, and an interrupt ends it with 0.
func TestWebWiring(t *testing.T) {
	h := newDaemon(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	outR, outW := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"--socket", h.Socket, "web", "--http", "127.0.0.1:0"}, strings.NewReader(""), outW, &stderr)
		outW.Close()
	}()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil {
		t.Fatalf("no URL on stdout: %v; stderr %s", err, stderr.String())
	}
	url := strings.TrimSpace(line)
	if !regexp.MustCompile(`^http://127\.0\.0\.1:[0-9]+/\?token=[0-9a-f]{64}$`).MatchString(url) {
		t.Fatalf("printed %q, want http://127.0.0.1:PORT/?token=HEX", url)
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte("jaild playground")) || len(resp.Cookies()) != 0 || resp.Request.URL.String() != url {
		t.Errorf("GET %s: %d from %s, cookies %v: want the page at that URL, no cookie", url, resp.StatusCode, resp.Request.URL, resp.Cookies())
	}
	resp, err = http.Get(url[:strings.Index(url, "?")])
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET without the token: %d, want 403", resp.StatusCode)
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("exit %d after the interrupt, want 0: %s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("jailctl web did not stop after the interrupt")
	}
}

func TestWebRefusals(t *testing.T) {
	h := newDaemon(t)
	for _, tc := range []struct {
		args    []string
		mention string
	}{
		{[]string{"--socket", h.Socket, "web", "--http", "0.0.0.0:0"}, "not a loopback address; pass --allow-remote"},
		{[]string{"--socket", h.Socket, "web", "--http", "[::]:0"}, "not a loopback address"},
		{[]string{"--socket", h.Socket + ".none", "web", "--http", "127.0.0.1:0"}, "cannot connect to jaild"},
		{[]string{"--socket", h.Socket, "web", "--http", "nonsense"}, "want HOST:PORT"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), tc.args, strings.NewReader(""), &stdout, &stderr)
		if code != exitError || !strings.Contains(stderr.String(), tc.mention) || stdout.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q: want exit 2 naming %q", tc.args, code, stdout.String(), stderr.String(), tc.mention)
		}
	}
}
