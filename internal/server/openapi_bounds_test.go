package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jaild/jaild/internal/allowlist"
	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/filestore"
	"github.com/jaild/jaild/internal/policy"
	"github.com/jaild/jaild/internal/ruff"
	"github.com/jaild/jaild/internal/run/spec"
)

// at returns the value at a JSON pointer of the OpenAPI document.
func at(t *testing.T, d any, ptr string) any {
	t.Helper()
	v := d
	for _, k := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		k = strings.NewReplacer("~1", "/", "~0", "~").Replace(k)
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i, _ := strconv.Atoi(k)
			if i >= len(x) {
				t.Fatalf("%s: no index %d", ptr, i)
			}
			v = x[i]
		default:
			t.Fatalf("%s: nothing at %q", ptr, k)
		}
	}
	if v == nil {
		t.Fatalf("%s: absent", ptr)
	}
	return v
}

// TestOpenAPIBounds holds the bounds the document states to the ones the
// code enforces: each bound of a request is the constant the server, the
// engine or the store checks; configurable bounds give the configuration's
// defaults; a limit's maximum is the ceiling no configuration may pass.
func TestOpenAPIBounds(t *testing.T) {
	dec := json.NewDecoder(bytes.NewReader(api.OpenAPI()))
	dec.UseNumber()
	var d any
	if err := dec.Decode(&d); err != nil {
		t.Fatal(err)
	}
	num := func(ptr string) int64 {
		t.Helper()
		n, err := at(t, d, ptr).(json.Number).Int64()
		if err != nil {
			t.Fatalf("%s: %v", ptr, err)
		}
		return n
	}
	const S = "/components/schemas/"
	for ptr, want := range map[string]int64{
		S + "ExecuteRequest/properties/code/maxLength":                     policy.MaxCodeBytes,
		S + "ExecuteRequest/properties/code/minLength":                     1,
		S + "SessionExecuteRequest/properties/code/maxLength":              policy.MaxCodeBytes,
		S + "SessionExecuteRequest/properties/code/minLength":              1,
		S + "LintRequest/properties/code/maxLength":                        policy.MaxCodeBytes,
		S + "FormatRequest/properties/code/maxLength":                      policy.MaxCodeBytes,
		S + "ExecuteRequest/properties/stdin/maxLength":                    policy.MaxStdinBytes,
		S + "SessionExecuteRequest/properties/stdin/maxLength":             policy.MaxSessionStdinBytes,
		S + "ExecuteRequest/properties/files/maxItems":                     spec.MaxFiles,
		S + "SessionCreateRequest/properties/files/maxItems":               spec.MaxFiles,
		S + "SessionExecuteRequest/properties/files/maxItems":              spec.MaxFiles,
		S + "ExecuteRequest/properties/return_files/maxItems":              spec.MaxPatterns,
		S + "SessionExecuteRequest/properties/return_files/maxItems":       spec.MaxPatterns,
		S + "ExecuteRequest/properties/return_files/items/maxLength":       spec.MaxPathBytes,
		S + "FileIn/properties/path/maxLength":                             spec.MaxPathBytes,
		S + "ExecuteRequest/properties/env/maxProperties":                  spec.MaxEnvVars,
		S + "SessionCreateRequest/properties/env/maxProperties":            spec.MaxEnvVars,
		S + "ExecuteRequest/properties/env/propertyNames/maxLength":        spec.MaxEnvNameBytes,
		S + "ExecuteRequest/properties/env/additionalProperties/maxLength": spec.MaxEnvValBytes,
		S + "ExecuteRequest/properties/allow_hosts/maxItems":               allowlist.MaxEntries,
		S + "SessionCreateRequest/properties/allow_hosts/maxItems":         allowlist.MaxEntries,
		S + "LintRequest/properties/select/maxItems":                       ruff.MaxRules,
		S + "LintRequest/properties/ignore/maxItems":                       ruff.MaxRules,
		S + "ExecuteResponse/properties/figures/maxItems":                  spec.MaxFigures,
		S + "StoredFile/properties/name/maxLength":                         filestore.MaxNameBytes,
		"/paths/~1v1~1files/post/parameters/0/schema/maxLength":            filestore.MaxNameBytes,
		S + "SessionCreateRequest/properties/ttl_s/maximum":                int64(config.MaxSessionTTL.Seconds()),
		S + "SessionCreateRequest/properties/idle_timeout_s/maximum":       int64(config.MaxSessionTTL.Seconds()),
		S + "SessionExecuteRequest/properties/env/maxProperties":           0, // refused in a call
		S + "SessionExecuteRequest/properties/allow_hosts/maxItems":        0,
		S + "SessionExecuteRequest/properties/network/maxLength":           0,
		S + "Limits/properties/timeout_ms/minimum":                         1,
		S + "CommandRequest/properties/stdin/maxLength":                    spec.MaxCommandStdin,
		S + "CommandStdinRequest/properties/data/maxLength":                spec.MaxCommandStdin,
		S + "CommandRequest/properties/argv/maxItems":                      spec.MaxCommandArgs,
		S + "Limits/properties/memory_mb/minimum":                          1,
		S + "Limits/properties/pids/minimum":                               1,
		S + "Limits/properties/file_size_mb/minimum":                       1,
		S + "Limits/properties/output_bytes/minimum":                       1,
	} {
		if got := num(ptr); got != want {
			t.Errorf("%s is %d; the code's bound is %d", ptr, got, want)
		}
	}

	desc := func(ptr string) string {
		t.Helper()
		s, _ := at(t, d, ptr+"/description").(string)
		return s
	}
	mentions := func(ptr string, vals ...any) {
		t.Helper()
		s := desc(ptr)
		for _, v := range vals {
			if !strings.Contains(s, fmt.Sprint(v)) {
				t.Errorf("%s: the description does not give %v: %q", ptr, v, s)
			}
		}
	}

	// A limit: its default and maxima (configurable) in the description,
	// its maximum the ceiling that configuration validation enforces.
	def := config.Default()
	for _, f := range []struct {
		name     string
		d, m, am int64
		setAdmin func(c *config.Config, v int64)
	}{
		{"timeout_ms", def.Defaults.TimeoutMs, def.Maxima.TimeoutMs, def.AdminMaxima.TimeoutMs, func(c *config.Config, v int64) { c.AdminMaxima.TimeoutMs = v }},
		{"memory_mb", def.Defaults.MemoryMB, def.Maxima.MemoryMB, def.AdminMaxima.MemoryMB, func(c *config.Config, v int64) { c.AdminMaxima.MemoryMB = v }},
		{"pids", def.Defaults.Pids, def.Maxima.Pids, def.AdminMaxima.Pids, func(c *config.Config, v int64) { c.AdminMaxima.Pids = v }},
		{"file_size_mb", def.Defaults.FileSizeMB, def.Maxima.FileSizeMB, def.AdminMaxima.FileSizeMB, func(c *config.Config, v int64) { c.AdminMaxima.FileSizeMB = v }},
		{"output_bytes", def.Defaults.OutputBytes, def.Maxima.OutputBytes, def.AdminMaxima.OutputBytes, func(c *config.Config, v int64) { c.AdminMaxima.OutputBytes = v }},
	} {
		ptr := S + "Limits/properties/" + f.name
		mentions(ptr, "default "+strconv.FormatInt(f.d, 10), "default "+strconv.FormatInt(f.m, 10), "default "+strconv.FormatInt(f.am, 10), "maxima."+f.name, "admin_maxima."+f.name)
		ceiling := num(ptr + "/maximum")
		if lv := num(S + "LimitValues/properties/" + f.name + "/maximum"); lv != ceiling {
			t.Errorf("LimitValues.%s maximum %d, Limits' %d", f.name, lv, ceiling)
		}
		c := config.Default()
		f.setAdmin(&c, ceiling)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: admin_maxima at the document's maximum %d is refused: %v", f.name, ceiling, err)
		}
		f.setAdmin(&c, ceiling+1)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "admin_maxima."+f.name) {
			t.Errorf("%s: admin_maxima above the document's maximum (%d) is not refused: %v", f.name, ceiling+1, err)
		}
	}

	// Other configurable bounds name their setting and its default.
	sc, fc := def.Sessions, def.Files
	mentions(S+"SessionCreateRequest/properties/idle_timeout_s", "sessions.idle_timeout", int64(sc.IdleTimeout.Seconds()), "sessions.max_idle_timeout", int64(sc.MaxIdleTimeout.Seconds()))
	mentions(S+"SessionCreateRequest/properties/ttl_s", "sessions.ttl", int64(sc.TTL.Seconds()), "sessions.max_ttl", int64(sc.MaxTTL.Seconds()), "sessions.admin_max_ttl", int64(sc.AdminMaxTTL.Seconds()))
	mentions(S+"SessionInfo/properties/max_per_uid", "sessions.max_per_uid", sc.MaxPerUID)
	mentions(S+"SessionInfo/properties/max_total", "sessions.max_total", sc.MaxTotal)
	mentions(S+"FilesInfo/properties/max_file_bytes", "files.max_file_mb", fc.MaxFileMB)
	mentions(S+"FilesInfo/properties/max_bytes_per_uid", "files.max_mb_per_uid", fc.MaxMBPerUID)
	mentions(S+"FilesInfo/properties/max_files_per_uid", "files.max_files_per_uid", fc.MaxFilesPerUID)
	mentions(S+"FilesInfo/properties/max_total_bytes", "files.max_total_mb", fc.MaxTotalMB)
	mentions(S+"FilesInfo/properties/min_free_bytes", "files.min_free_mb", fc.MinFreeMB)
	mentions(S+"FilesInfo/properties/ttl_s", "files.ttl", int64(fc.TTL.Seconds()))
	mentions(S+"Capacity/properties/queue_size", "admission.queue_size", def.Admission.QueueSize)
	mentions(S+"NetworkInfo/properties/max_connections", "network.max_connections", def.Network.MaxConnections)
	mentions(S+"CallerInfo/properties/quota_remaining", "admission.daily_quota", def.Admission.DailyQuota)
	mentions("/components/responses/TooLarge", "max_body_bytes", def.MaxBodyBytes)
	mentions("/components/responses/RateLimited", "admission.rate_per_minute", def.Admission.RatePerMinute, "burst "+strconv.Itoa(def.Admission.Burst), def.Admission.DailyQuota, "sessions.max_per_uid")
	mentions("/paths/~1v1~1files/post", "at most "+strconv.Itoa(maxFormParts)+" parts", "each part's header at most "+strconv.Itoa(maxPartHead>>10)+" KiB")
	mentions(S+"ExecuteRequest/properties/files", "at most "+strconv.Itoa(policy.MaxFileIDs)+" different `file_id`s")
	mentions(S+"ExecuteResponse/properties/figures", "at most "+strconv.Itoa(spec.MaxFigures), strconv.Itoa(spec.MaxFigureBytes>>20)+" MiB each", strconv.Itoa(spec.MaxFiguresTotalBytes>>20)+" MiB together")
	mentions(S+"ExecuteRequest/properties/return_files", "At most "+strconv.Itoa(spec.MaxReturnFiles)+" files", strconv.Itoa(spec.MaxReturnFileBytes>>20)+" MiB and "+strconv.Itoa(spec.MaxReturnTotalBytes>>20)+" MiB together")

	// Patterns the document gives are the code's rules: ruff rule codes,
	// and the ids the server makes.
	rule := regexp.MustCompile(at(t, d, S+"LintRequest/properties/select/items/pattern").(string))
	for _, r := range []string{"ALL", "E", "F401", "RUF029", "PLR2004", "E5", "all", "F-1", "ABCDE1", "F40100", "", "E 5"} {
		if ok, err := rule.MatchString(r), ruff.CheckRules("select", []string{r}); ok != (err == nil) {
			t.Errorf("rule %q: the document's pattern says %v, ruff.CheckRules %v", r, ok, err)
		}
	}
	fileID := regexp.MustCompile(at(t, d, S+"StoredFile/properties/file_id/pattern").(string))
	for _, id := range []string{"f-0123456789abcdef0123456789abcdef", "f-0123456789ABCDEF0123456789abcdef", "f-0123", "g-0123456789abcdef0123456789abcdef", "f-0123456789abcdef0123456789abcdef0"} {
		if fileID.MatchString(id) != filestore.ValidID(id) {
			t.Errorf("file id %q: the document's pattern says %v, filestore.ValidID %v", id, fileID.MatchString(id), filestore.ValidID(id))
		}
	}
	env := regexp.MustCompile(at(t, d, S+"ExecuteRequest/properties/env/propertyNames/pattern").(string))
	for _, name := range []string{"A", "_x1", "MY_VAR", "1A", "A-B", "", "Ä"} {
		if ok, err := env.MatchString(name), spec.ValidateEnv(map[string]string{name: "v"}); ok != (err == nil) {
			t.Errorf("env name %q: the document's pattern says %v, spec.ValidateEnv %v", name, ok, err)
		}
	}
}
