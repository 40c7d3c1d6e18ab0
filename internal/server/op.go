package server

import (
	"net/http"
	"time"

	"github.com/jaild/jaild/internal/peer"
)

// op is one API operation's prologue, written once: its start, its
// caller, its memory lease (the body's decoding reserved in it as it is
// read) and its name for the audit log.
type op struct {
	s     *Server
	name  string
	who   peer.Caller
	mem   *lease
	start time.Time
}

// begin starts operation name for r: the caller identified, a lease taken
// and r's body decoded into req (nil: no body is read). The caller ends
// it with done (deferred) and reports a refusal with fail.
func (s *Server) begin(w http.ResponseWriter, r *http.Request, name string, req any) (*op, error) {
	o := &op{s: s, name: name, who: callerOf(r), start: time.Now()}
	o.mem = s.newLease(o.who)
	if req == nil {
		return o, nil
	}
	s.budgetBody(r, o.mem)
	if err := s.decode(w, r, req); err != nil {
		o.done()
		return nil, o.fail(err)
	}
	return o, nil
}

// done releases what the operation holds of the memory budget.
func (o *op) done() { o.mem.release() }

// fail records err as the operation's refusal in the audit log (and its
// metrics) and returns it for the error response.
func (o *op) fail(err error) error {
	o.s.audit.refused(o.who, o.name, err)
	return err
}
