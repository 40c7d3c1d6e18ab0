package jail

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"unicode/utf8"
)

// capture reads a stream from the jail into memory, keeping at most limit
// bytes. When the stream goes past the limit, it marks itself truncated,
// calls onOverflow once, and keeps draining (and discarding) so that the
// writer is never blocked on a full pipe.
type capture struct {
	buf        []byte
	limit      int64
	truncated  bool
	onOverflow func()
}

func (c *capture) readFrom(r io.Reader) {
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			room := c.limit - int64(len(c.buf))
			if int64(n) > room {
				c.buf = append(c.buf, chunk[:room]...)
				if !c.truncated {
					c.truncated = true
					if c.onOverflow != nil {
						c.onOverflow()
					}
				}
			} else {
				c.buf = append(c.buf, chunk[:n]...)
			}
		}
		if err != nil {
			return
		}
	}
}

// Bounds on the runner's side channel.
const (
	maxRecordBytes   = 256 << 10
	maxExcTypeBytes  = 256
	maxExcMsgBytes   = 4 << 10
	maxResultBytes   = 64 << 10
	truncationMarker = "…"
)

type record struct {
	Type    string           `json:"type"`
	ExcType string           `json:"exc_type"`
	Message string           `json:"message"`
	Line    *json.RawMessage `json:"line"`
	Repr    *string          `json:"repr"`
	Signal  int              `json:"signal"`
}

// records is what the runner reported, validated.
type records struct {
	exc    *Exception
	result *string
	signal int // the user's process died by this signal (see Run)
}

// parseRecords decodes the runner's JSON-lines side channel. Its bytes come
// from the jail, where user code can write to the same pipe, so every line
// is validated and bounded and anything malformed is ignored. The last
// well-formed record of each type wins (the runner writes its own last).
func parseRecords(data []byte, codeLines int) records {
	var out records
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), maxRecordBytes)
	for sc.Scan() {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			continue
		}
		switch r.Type {
		case "exception":
			if r.ExcType == "" {
				continue
			}
			e := &Exception{
				Type:    clip(r.ExcType, maxExcTypeBytes),
				Message: clip(r.Message, maxExcMsgBytes),
			}
			if r.Line != nil {
				var n int
				if json.Unmarshal(*r.Line, &n) == nil && n > 0 && n <= codeLines {
					e.Line = n
				}
			}
			out.exc = e
		case "result":
			if r.Repr != nil {
				s := clip(*r.Repr, maxResultBytes)
				out.result = &s
			}
		case "exit":
			if r.Signal > 0 && r.Signal < 65 {
				out.signal = r.Signal
			}
		}
	}
	return out
}

// clip bounds s to n bytes without splitting a UTF-8 sequence and with a
// marker when something was cut. json.Unmarshal already replaced invalid
// UTF-8 with U+FFFD.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	cut := n - len(truncationMarker)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + truncationMarker
}
