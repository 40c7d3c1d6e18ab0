package api

import "encoding/json"

// Media types of a streamed execute (the request's Accept header): one
// Event per line of JSON, or the same events as Server-Sent Events.
const (
	MediaNDJSON = "application/x-ndjson"
	MediaSSE    = "text/event-stream"
)

// Event is one event of a streamed execute. On the NDJSON stream each line
// is an Event; on the SSE stream ID is the "id:" field, Event the "event:"
// field and Data the "data:" line. IDs count from 1 without gaps.
type Event struct {
	ID    int64           `json:"id"`
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
}

// Event names, with the type of their data.
const (
	EventStart     = "start"     // EventStartData
	EventStdout    = "stdout"    // EventText
	EventStderr    = "stderr"    // EventText
	EventFigure    = "figure"    // Figure
	EventException = "exception" // ExecError
	EventResult    = "result"    // EventResultData
	EventDisplay   = "display"   // Output (display_data)
	EventKeepalive = "keepalive" // {}
	// EventDone is the last event of a run that ran: the usual response
	// (ExecuteResponse, or SessionExecuteResponse for a session's call)
	// with stdout, stderr, figures and outputs empty (they were events:
	// figure for each figure, display for each display_data output,
	// figures included, and result for the execute_result; the
	// truncation flags are kept).
	EventDone = "done"
	// EventError is the last event of a request that failed after the
	// stream began: ErrorBody.
	EventError = "error"
)

// EventStartData is the data of a start event: the run has begun.
type EventStartData struct {
	RunID string `json:"run_id"`
	Warm  bool   `json:"warm"`
}

// EventText is the data of a stdout or stderr event: a chunk of the
// stream, in order; bytes that are not UTF-8 are U+FFFD, as in the JSON
// response (the concatenation of a stream's chunks is exactly the
// response's field).
type EventText struct {
	Text string `json:"text"`
}

// EventResultData is the data of a result event: the repr of the final
// expression (last_line_interactive), and its MIME bundle (Data and
// Metadata as in Output: text/plain at least).
type EventResultData struct {
	Repr     string                     `json:"repr"`
	Data     map[string]json.RawMessage `json:"data,omitempty"`
	Metadata map[string]json.RawMessage `json:"metadata,omitempty"`
}
