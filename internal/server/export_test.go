package server

// RoutePatterns returns the method and path patterns s serves ("POST
// /v1/execute"), for tests that hold them to the OpenAPI document.
func RoutePatterns(s *Server) []string {
	var out []string
	for _, rt := range s.routes() {
		out = append(out, rt.method+" "+rt.path)
	}
	return out
}
