package server

import "strings"

// RoutePatterns returns the method and path patterns s serves ("POST
// /v1/execute"), for tests that hold them to the OpenAPI document.
func RoutePatterns(s *Server) []string {
	var out []string
	for _, rt := range s.routes() {
		// The document's {path} is the route's {path...}.
		out = append(out, rt.method+" "+strings.Replace(rt.path, "{path...}", "{path}", 1))
	}
	return out
}
