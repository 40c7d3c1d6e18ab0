package cli

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/client"
)

// flagKind is what a command that runs code asks of the daemon; it picks
// the flags runFlags registers and their words.
type flagKind int

const (
	forRun     flagKind = iota // exec: one run
	forSession                 // session new: a session's jail
	forRepl                    // repl: a session's jail, and where figures go
	forCall                    // session exec: one call in a session
	forRuff                    // lint, format
)

// runFlags are the flags of the commands that run code (exec, session
// new and exec, repl, lint, format), defined once: the code and its
// stdin, limits, environment, network, image, files in, what comes back
// and --json. register adds those of a kind.
type runFlags struct {
	code, stdinFile string
	codeSet         bool
	limits          api.Limits
	idle, ttl       *int64
	env             map[string]string
	network         string
	allowHosts      []string
	files           []fileSpec
	get             []string
	outDir          string
	toStore         bool
	interactive     bool
	image           string
	json            bool
	n               int // how many of a session's flags were given
}

// fileSpec is one --file LOCAL[:PATH].
type fileSpec struct{ local, path string }

// register adds the flags of kind k to fs.
func (f *runFlags) register(fs *flag.FlagSet, k flagKind) {
	f.env = map[string]string{}
	switch k {
	case forRuff:
		fs.StringVar(&f.image, "image", "", ruffImageUsage)
		fs.BoolVar(&f.json, "json", false, "print the daemon's response JSON")
		return
	case forSession, forRepl:
		f.sessionFlags(fs)
		if k == forRepl {
			fs.StringVar(&f.outDir, "out-dir", ".", "write figures beneath `DIR`, creating it")
		}
		return
	}
	whose := map[flagKind]string{forRun: "the run's", forCall: "the call's"}[k]
	fs.Func("c", "run `CODE` instead of a file", func(s string) error {
		f.code, f.codeSet = s, true
		return nil
	})
	fs.StringVar(&f.stdinFile, "stdin-file", "", "send the content of `PATH` as "+whose+" stdin (- for jailctl's stdin)")
	fs.Func("get", "return the workspace files matching `PATTERN` (*, ?, [..] and **); repeatable", func(s string) error {
		f.get = append(f.get, s)
		return nil
	})
	fs.StringVar(&f.outDir, "out-dir", ".", "write returned files and figures beneath `DIR`, creating it")
	fs.BoolVar(&f.toStore, "return-to-store", false, "keep the returned files in the daemon's file store and print their IDs instead of writing them")
	fs.BoolVar(&f.interactive, "interactive", k == forCall, "print the value of a final expression, as the Python REPL does")
	fs.BoolVar(&f.json, "json", false, "print the daemon's response JSON on stdout and nothing else")
	if k == forCall {
		fs.Func("timeout-ms", "wall-clock limit of this call in `MS` (default: the session's)", positive(&f.limits.TimeoutMs, "milliseconds"))
		fs.Func("output-bytes", "output limit of this call in `BYTES` (default: the session's)", positive(&f.limits.OutputBytes, "bytes"))
		fs.Func("file", "upload `LOCAL[:PATH]` into the workspace at PATH (default: LOCAL's base name) before the call; repeatable", f.fileFlag)
		return
	}
	fs.Func("timeout", "wall-clock limit of the run, a `DURATION` such as 5s or 1500ms (default: the daemon's)", func(s string) error {
		ms, err := parseTimeout(s)
		f.limits.TimeoutMs = &ms
		return err
	})
	fs.Func("memory", "memory limit of the run in `MB` (default: the daemon's)", func(s string) error {
		mb, err := strconv.ParseInt(s, 10, 64)
		if err != nil || mb <= 0 {
			return errors.New("want a positive number of MB")
		}
		f.limits.MemoryMB = &mb
		return nil
	})
	fs.Func("file", "upload `LOCAL[:PATH]` into the workspace at PATH (default: LOCAL's base name); repeatable", f.fileFlag)
	f.jailFlags(fs, "the run's", "run in", func(set func(string) error) func(string) error { return set })
}

// sessionFlags are the flags that create a session; f.n counts them.
func (f *runFlags) sessionFlags(fs *flag.FlagSet) {
	count := func(set func(string) error) func(string) error {
		return func(s string) error { f.n++; return set(s) }
	}
	seconds := func(dst **int64) func(string) error {
		return count(func(s string) error {
			ms, err := parseTimeout(s)
			if err != nil {
				return err
			}
			secs := (ms + 999) / 1000
			*dst = &secs
			return nil
		})
	}
	fs.Func("memory-mb", "memory limit of the session's jail in `MB` (default: the daemon's)", count(positive(&f.limits.MemoryMB, "MB")))
	fs.Func("pids", "process limit of the session's jail, a `NUMBER` (default: the daemon's)", count(positive(&f.limits.Pids, "processes")))
	fs.Func("file-size-mb", "largest file the session may write, in `MB` (default: the daemon's)", count(positive(&f.limits.FileSizeMB, "MB")))
	fs.Func("timeout-ms", "each call's wall-clock limit in `MS` unless the call sets its own (default: the daemon's)", count(positive(&f.limits.TimeoutMs, "milliseconds")))
	fs.Func("output-bytes", "each call's output limit in `BYTES` unless the call sets its own (default: the daemon's)", count(positive(&f.limits.OutputBytes, "bytes")))
	fs.Func("idle-timeout", "end the session once it has been idle for `DURATION`, such as 10m (default: the daemon's)", seconds(&f.idle))
	fs.Func("ttl", "end the session `DURATION` after it starts, busy or not (default: the daemon's)", seconds(&f.ttl))
	fs.Func("file", "upload `LOCAL[:PATH]` into the session's workspace at PATH (default: LOCAL's base name); repeatable", count(f.fileFlag))
	f.jailFlags(fs, "the session's", "run the session in", count)
}

// jailFlags are --env, --network, --allow-host and --image, of a run or
// a session.
func (f *runFlags) jailFlags(fs *flag.FlagSet, whose, runIn string, count func(func(string) error) func(string) error) {
	fs.Func("env", "set `NAME=VALUE` in "+whose+" environment; repeatable", count(setEnv(f.env)))
	fs.Func("network", "`MODE`: none (loopback only, the default) or internet (egress, if the daemon allows it)", count(func(s string) error {
		f.network = s
		return nil
	}))
	fs.Func("allow-host", "with --network internet, allow only `HOST` (example.com, *.example.com, 198.51.100.0/24, each with an optional :PORT); repeatable", count(func(s string) error {
		f.allowHosts = append(f.allowHosts, s)
		return nil
	}))
	fs.Func("image", runIn+" the image `NAME` (\"jailctl images\" lists them; default: the daemon's default image)", count(func(s string) error {
		f.image = s
		return nil
	}))
}

// setEnv parses a --env NAME=VALUE into env.
func setEnv(env map[string]string) func(string) error {
	return func(s string) error {
		name, value, ok := strings.Cut(s, "=")
		if !ok || name == "" {
			return errors.New("want NAME=VALUE")
		}
		env[name] = value
		return nil
	}
}

// ruffImageUsage is the --image usage of lint and format.
const ruffImageUsage = "run ruff in the image `NAME`, one that has ruff (default: the default image if it has ruff, else the first that has)"

// positive parses a positive whole number of unit into *dst.
func positive(dst **int64, unit string) func(string) error {
	return func(s string) error {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("want a positive number of %s", unit)
		}
		*dst = &n
		return nil
	}
}

// fileFlag parses a repeatable --file LOCAL[:PATH].
func (f *runFlags) fileFlag(s string) error {
	local, path, cut := strings.Cut(s, ":")
	if !cut {
		path = filepath.Base(local)
	}
	if local == "" || path == "" {
		return errors.New("want LOCAL[:PATH]")
	}
	f.files = append(f.files, fileSpec{local, path})
	return nil
}

// network is the request's network: --allow-host means egress.
func (f *runFlags) networkMode() string {
	if len(f.allowHosts) > 0 && f.network == "" {
		return api.NetworkInternet
	}
	return f.network
}

// limitsPtr is the request's limits: nil when no flag set one.
func (f *runFlags) limitsPtr() *api.Limits {
	if f.limits == (api.Limits{}) {
		return nil
	}
	l := f.limits
	return &l
}

// envMap is the request's env: nil when no --env.
func (f *runFlags) envMap() map[string]string {
	if len(f.env) == 0 {
		return nil
	}
	return f.env
}

// returnAs is the request's return_files_as.
func (f *runFlags) returnAs() string {
	if f.toStore {
		return api.ReturnStore
	}
	return ""
}

// sessionRequest builds the create request, staging the --file uploads
// as stageFiles does: the caller runs cleanup once the session is created
// (or not).
func (f *runFlags) sessionRequest(e *env, c *client.Client) (_ *api.SessionCreateRequest, cleanup func(), _ error) {
	req := &api.SessionCreateRequest{IdleTimeoutS: f.idle, TTLS: f.ttl, Network: f.networkMode(), AllowHosts: f.allowHosts,
		Image: f.image, Limits: f.limitsPtr(), Env: f.envMap()}
	files, cleanup, err := e.stageFiles(c, f.files)
	req.Files = files
	return req, cleanup, err
}

// dial makes the daemon's client and stages f's --file uploads into
// *files (stageFiles); the caller runs cleanup once its request is done.
// ok is false when the command must return rc.
func (e *env) dial(daemon *target, f *runFlags, files *[]api.FileIn) (c *client.Client, cleanup func(), rc int, ok bool) {
	if c, rc, ok = e.client(daemon); !ok {
		return nil, nil, rc, false
	}
	in, cleanup, err := e.stageFiles(c, f.files)
	if err != nil {
		return nil, nil, e.daemonError(err), false
	}
	*files = in
	return c, cleanup, 0, true
}
