package cli

import (
	"fmt"
	"io"
	"os"
)

// maxInputBytes bounds what jailctl reads from one local file or stdin, so
// that "jailctl exec /dev/zero" fails instead of exhausting memory. The
// daemon's own request cap is lower.
const maxInputBytes = 256 << 20

// readSource reads code from name, or from stdin when name is "" or "-".
// display is how diagnostics name it.
func (e *env) readSource(name string) (code, display string, err error) {
	if name == "" || name == "-" {
		b, err := readBounded(e.stdin, "stdin")
		return string(b), "-", err
	}
	b, err := readFile(name)
	return string(b), name, err
}

// readFile reads a local file of at most maxInputBytes.
func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%s is a directory", name)
	}
	return readBounded(f, name)
}

func readBounded(r io.Reader, name string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxInputBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(b) > maxInputBytes {
		return nil, fmt.Errorf("%s is larger than %d MiB", name, maxInputBytes>>20)
	}
	return b, nil
}
