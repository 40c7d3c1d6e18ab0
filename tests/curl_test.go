package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// curlAsNobody runs curl -i as uid 65534 with args, stdin (unless nil) as
// its standard input, and returns the response's status, headers and
// body. A daemon that answers before the whole body is sent may make curl
// fail to send the rest: the answer is what counts.
func curlAsNobody(t *testing.T, stdin []byte, args ...string) (int, http.Header, []byte) {
	t.Helper()
	status, header, body, err := curlNobodyErr(stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return status, header, body
}

// curlNobodyErr is curlAsNobody for a goroutine: it returns its error.
func curlNobodyErr(stdin []byte, args ...string) (int, http.Header, []byte, error) {
	// --raw: curl -i prints the headers as sent (Transfer-Encoding:
	// chunked, say) but would decode the body they describe.
	cmd := exec.Command("curl", append([]string{"-s", "-i", "--raw"}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobodyUID, Gid: nobodyUID}}
	out, cerr := cmd.Output()
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), nil)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("curl %s as uid %d: %v; output %s", short(strings.Join(args, " ")), nobodyUID, cerr, short(string(out)))
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("curl output's body: %v; output %s", err, short(string(out)))
	}
	return resp.StatusCode, resp.Header, b, nil
}

// curlAs runs curl against the socket as uid 65534 with body (unless "")
// as JSON and returns the HTTP status, the headers and the body.
func curlAs(t *testing.T, socket, method, path, body string) (int, http.Header, []byte) {
	t.Helper()
	return curlAsNobody(t, nil, curlJSONArgs(socket, method, path, body)...)
}

func curlJSONArgs(socket, method, path, body string) []string {
	args := []string{"--unix-socket", socket, "-X", method, "http://jaild" + path}
	if body != "" {
		args = append(args, "-H", "Content-Type: application/json", "-d", body)
	}
	return args
}
