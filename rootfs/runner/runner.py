"""jaild in-jail runner: runs jobs of user Python code in this process.

The daemon starts it inside the jail, as a module imported from its
directory (its bytecode is compiled into the image), under the jail's
pid 1, /opt/jaild/init (init.c):

    /opt/jaild/init /usr/bin/python3 -s -B -c \
        "import sys; sys.path[0] = '/opt/jaild'; import runner; runner.main()"

with cwd /workspace and fds 0-2 for the user's stdin/stdout/stderr, plus:

  fd 3  JOBS: JSON objects, one per line (the last may lack its newline)
        {"code": str, "filename": "main.py", "last_line_interactive": bool,
         "figures_dir": "/jaild/figures" or null, "max_figures": 16,
         "max_outputs": 64,
         "env": {NAME: value}, "rlimits": {"RLIMIT_AS": [soft, hard], ...},
         "more": bool, "session": bool, "call": int, "stdin": str|null,
         "cpu_s": int|null}
        env and rlimits are applied before the user's code (rlimits: the
        first job's; they can only be lowered).  A job without "more" is
        the last: nothing may follow it on fd 3 but EOF, and the process
        ends as a script would after it (a single run).  After a job with
        "more", the runner writes {"type": "end", "status": int} to fd 4
        and reads the next job: the user's globals, imports and files
        persist.  EOF then ends the process with status 0; a SystemExit ends
        it as a script would; an uncaught exception (KeyboardInterrupt
        included) is reported and ends only its job, with status 1.
        A job with "session" (which implies "more") is a call of a session
        (internal/run/session.go): a SystemExit ends only the call, with
        its status; "stdin" (bytes as code points 0-255) is the call's
        sys.stdin (fd 0 is empty); "cpu_s" gives the call that many CPU
        seconds (RLIMIT_CPU's soft limit, from what the process used so
        far); figures are numbered from 1 again; the end record carries
        "call"; and SIGINT interrupts the user's code only, never the
        runner between calls.
        A job with "exec" (a list of strings: an absolute path and its
        arguments) runs no Python: the runner applies its env and rlimits,
        closes every fd but 0-2, restores the signals Python ignores, and
        executes it in its place, with the environment it started with
        (the daemon runs ruff so in a warm jail: lint and format).  Nothing
        may follow it; its exit status is the command's, 127 if it cannot
        be executed.
        JAILD_PREIMPORT (environment, comma-separated modules, possibly
        none) marks a warm pool's jail: the runner imports those modules
        and its own lazy ones, writes {"type": "ready"} to fd 4, and waits
        here for its job.
  fd 4  RECORDS, written: JSON lines, one object each
        {"type": "exception", "exc_type": str, "message": str, "line": int|null}
        {"type": "result", "repr": str, "truncated": bool}
            (+ "name": "output-N.json" when the value's MIME bundle has
            more than text/plain)
        {"type": "display", "name": "output-N.json"} (display())
        {"type": "figure", "name": "figure-1.png", "text": repr(figure)}
        {"type": "ready"}
        {"type": "start", "call": int} (a session's job: its code begins;
        SIGINT interrupts it from now on)
        {"type": "end", "status": int} ("call": int for a session's job)
        and, from init, {"type": "exit", "signal": int} when this process
        died by a signal.

Rich outputs: display() is a builtin that follows IPython's display
protocol (_ipython_display_, _repr_mimebundle_, _repr_html_ and the other
_repr_*_ methods); each bundle is written as output-N.json in the figures
dir, {"data": {MIME type: value}, "metadata": {...}} (images and PDFs as
base64), at most "max_outputs" of them per job and MAX_OUTPUT_BYTES each,
numbered from 1 again in each session call.  The records give their order
among the figures.

The user's code runs as __main__ in this process and can write to fd 4
too, so the daemon treats records as untrusted input.  Everything done
before the job is read is setup that a warm pool runs ahead of time.
Nothing here is a security boundary: the jail is.

The exit status is Python's: 0, 1 for an uncaught exception, the
SystemExit code; 2 means a malformed job.  Death by signal N (SIGINT for
an uncaught KeyboardInterrupt) becomes init's 128+N and its "exit" record.
"""

import _signal as signal  # the signal module's enums import enum: ~5 ms
import builtins
import gc
import linecache
import os
import resource  # every job lowers rlimits; a warm jail has it already
import sys
import types

JOB_FD = 3
RECORD_FD = 4
RESULT_REPR_LIMIT = 64 * 1024
FIGURE_TEXT_LIMIT = 256
MAX_OUTPUT_BYTES = 8 << 20  # one rich output's file (the daemon's bound too)
MAX_JOB_BYTES = 64 << 20  # one job's line on fd 3
EXCEPTION_MESSAGE_LIMIT = 64 * 1024

# build.sh (customize.sh) builds matplotlib's font cache here at image build time.
MPL_CACHE_DIR = "/opt/jaild/mplcache"
DEFAULT_MPLCONFIGDIR = "/tmp/.matplotlib"

RUNNER_FILE = __file__
MAIN_MODULE = None  # the user's __main__, shared by the process's jobs
OUTPUTS = None  # the OutputWriter: display() and the last expression's bundle


class JobError(Exception):
    pass


def json_codec():
    """Return (loads, dumps) for the job and the records.

    The json module imports re and enum, ~8 ms of a cold run's start-up, so
    this uses the C scanner and string encoder behind it directly, for the
    few shapes that cross fd 3 and fd 4. json itself is the fallback should
    those internals ever change."""
    try:
        from _json import encode_basestring_ascii, make_scanner

        class Context:  # what the C scanner reads off json.JSONDecoder
            strict = True
            object_hook = None
            object_pairs_hook = None
            parse_float = float
            parse_int = int

            def parse_constant(name):
                raise ValueError(f"{name} is not JSON")

        scan = make_scanner(Context)
    except (ImportError, AttributeError, TypeError):
        import json

        return json.loads, json.dumps

    space = " \t\n\r"

    def loads(data):
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        start = len(text) - len(text.lstrip(space))
        try:
            value, end = scan(text, start)
            if not text[end:].strip(space):
                return value
        except Exception:  # the scanner's errors need json.decoder loaded
            pass
        import json

        return json.loads(text)  # malformed: json says why

    def dumps(record):
        """A flat object of str, int, bool and None, as json.dumps writes it."""
        items = []
        for key, value in record.items():
            if isinstance(value, str):
                value = encode_basestring_ascii(value)
            elif value is None or isinstance(value, bool):
                value = {None: "null", True: "true", False: "false"}[value]
            elif isinstance(value, int):
                value = int.__repr__(value)
            else:
                raise TypeError(f"cannot encode {type(value).__name__}")
            items.append(f"{encode_basestring_ascii(key)}: {value}")
        return "{" + ", ".join(items) + "}"

    return loads, dumps


json_loads, json_dumps = json_codec()


def note(message):
    """Tell the user something on stderr, never failing."""
    try:
        print(f"jaild: {message}", file=sys.stderr, flush=True)
    except Exception:
        pass


def truncate_utf8(text, limit):
    """Return (text cut to at most `limit` UTF-8 bytes, whether it was cut)."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text, False
    return data[:limit].decode("utf-8", "ignore"), True


class RecordWriter:
    """Writes JSON-line records to fd 4 and never raises.

    User code may close fd 4 and reuse the number for a file of its own, so
    each write first checks that fd 4 is still the pipe we were given.
    """

    def __init__(self, fd):
        self._fd = fd
        try:
            os.set_inheritable(fd, False)
            self._identity = self._stat_identity()
        except OSError:
            self._identity = None  # not given a records pipe: records are dropped

    def _stat_identity(self):
        st = os.fstat(self._fd)
        return st.st_dev, st.st_ino

    def reattach(self, ino):
        """Takes fd 4 as the records pipe again when it is the pipe the
        daemon names by its inode: a paused session's restore gives the
        runner new pipes in place of the old (their inodes differ). User
        code cannot make another pipe of that inode."""
        try:
            st = os.fstat(self._fd)
        except OSError:
            return
        if (st.st_mode & 0o170000) == 0o010000 and st.st_ino == ino:  # S_IFIFO
            self._identity = st.st_dev, st.st_ino

    def emit(self, record):
        if self._identity is None:
            return
        try:
            if self._stat_identity() != self._identity:
                self._identity = None
                return
            data = memoryview((json_dumps(record) + "\n").encode("ascii"))
            while data:
                data = data[os.write(self._fd, data) :]
        except Exception:
            self._identity = None


class NumberedFiles:
    """Files NAME-N.EXT of a job in the figures dir, N from 1, at most the
    job's limit of them (past it, said once on stderr)."""

    kind = "file"

    def __init__(self, records):
        self._records = records
        self._dir = None
        self._limit = 0
        self._count = 0
        self._limit_noted = False

    def configure(self, figures_dir, limit, renumber=False):
        self._dir = figures_dir
        self._limit = limit
        if renumber:  # a session's call: the daemon emptied the dir
            self._count = 0
            self._limit_noted = False

    def _next(self):
        """The next number, or None past the limit."""
        if self._count >= self._limit:
            if not self._limit_noted:
                note(f"{self.kind} limit ({self._limit}) reached, further {self.kind}s are not kept")
                self._limit_noted = True
            return None
        self._count += 1
        return self._count


class FigureSaver(NumberedFiles):
    """Saves pyplot's open figures as figure-N.png in the figures dir and closes them."""

    kind = "figure"

    def save_open_figures(self):
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None or self._dir is None:
            return
        try:
            numbers = plt.get_fignums()
        except Exception as exc:
            note(f"cannot list matplotlib figures: {exc!r}")
            return
        for number in numbers:
            try:
                self._save(plt.figure(number))
            except Exception as exc:
                note(f"could not save figure {number}: {exc!r}")
            finally:
                try:
                    plt.close(number)
                except Exception:
                    pass

    def _save(self, figure):
        n = self._next()
        if n is None:
            return
        name = f"figure-{n}.png"
        path = os.path.join(self._dir, name)
        # Never follow or overwrite something user code put there.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            with open(fd, "wb") as f:
                figure.savefig(f, format="png")
        except BaseException:
            os.unlink(path)
            raise
        try:
            text, _ = truncate_utf8(repr(figure), FIGURE_TEXT_LIMIT)
        except Exception:
            text = "<Figure>"
        self._records.emit({"type": "figure", "name": name, "text": text})

    def save_now(self, figure):
        """Save one open pyplot figure now (display(fig)), and close it so
        that the end of the job does not save it again. Returns False when
        figure is not one of pyplot's open figures."""
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None or self._dir is None:
            return False
        try:
            number = figure.number
            if number not in plt.get_fignums() or plt.figure(number) is not figure:
                return False
        except Exception:
            return False
        try:
            self._save(figure)
        except Exception as exc:
            note(f"could not save figure {number}: {exc!r}")
        finally:
            try:
                plt.close(number)
            except Exception:
                pass
        return True


class PyplotShowHook:
    """Meta path finder that replaces matplotlib.pyplot.show, right after
    pyplot is imported, with a function that saves the open figures.

    With the Agg backend plt.show() would only warn.  Hooking the import
    keeps matplotlib itself from being imported before the user does.
    """

    def __init__(self, saver):
        self._saver = saver

    def find_spec(self, fullname, path, target=None):
        if fullname != "matplotlib.pyplot":
            return None
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            if finder is self or find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module
        saver = self._saver

        def exec_and_patch(module):
            exec_module(module)

            def show(*args, **kwargs):
                """Save all open figures (jaild replaces pyplot.show)."""
                saver.save_open_figures()

            module.show = show

        # The loader instance belongs to this one spec, so patching it is local.
        spec.loader.exec_module = exec_and_patch
        return spec


def prepare_matplotlib(saver):
    """Agg backend, a writable MPLCONFIGDIR holding the prebuilt font cache
    (so importing pyplot does not rebuild it), and the show() hook."""
    os.environ["MPLBACKEND"] = "Agg"
    config_dir = os.environ.get("MPLCONFIGDIR") or DEFAULT_MPLCONFIGDIR
    os.environ["MPLCONFIGDIR"] = config_dir
    try:
        os.makedirs(config_dir, mode=0o700, exist_ok=True)
        for entry in os.scandir(MPL_CACHE_DIR):
            if entry.name.startswith("fontlist-"):
                link = os.path.join(config_dir, entry.name)
                if not os.path.lexists(link):
                    os.symlink(entry.path, link)
    except OSError:
        pass  # no prebuilt cache (e.g. outside the image): matplotlib builds one
    sys.meta_path.insert(0, PyplotShowHook(saver))


# Rich outputs, as IPython makes them (IPython.core.formatters): the MIME
# types in the order IPython's display formatter tries them, with the
# _repr_*_ method of each.
REPR_METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("application/pdf", "_repr_pdf_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
    ("application/javascript", "_repr_javascript_"),
)
BINARY_MIMES = ("image/png", "image/jpeg", "application/pdf")  # base64 in a bundle


def real_method(obj, name):
    """obj's method `name`, as IPython finds it: None for a class, for an
    object that claims every attribute, and for anything not callable."""
    if isinstance(obj, type):
        return None
    try:
        if getattr(obj, "_ipython_canary_method_should_not_exist_", None) is not None:
            return None
        method = getattr(obj, name, None)
    except Exception:
        return None
    return method if callable(method) else None


def split_metadata(value):
    """A _repr_*_ method may return (data, metadata)."""
    if isinstance(value, tuple) and len(value) == 2:
        data, metadata = value
        return data, metadata if isinstance(metadata, dict) else None
    return value, None


def is_type(obj, module_prefix, name):
    cls = type(obj)
    return cls.__name__ == name and (cls.__module__ or "").startswith(module_prefix)


def mime_bundle(obj, include=None, exclude=None, text=None):
    """Return (data, metadata): obj's MIME bundle, as IPython's display
    formatter builds it. text, when given, is its text/plain."""
    data, metadata = {}, {}
    method = real_method(obj, "_repr_mimebundle_")
    if method is not None:
        try:
            value, md = split_metadata(method(include=include, exclude=exclude))
        except Exception as exc:
            note(f"{type(obj).__name__}._repr_mimebundle_ failed: {exc!r}")
            value, md = None, None
        if isinstance(value, dict):
            data.update((k, v) for k, v in value.items() if isinstance(k, str) and v is not None)
        if md:
            metadata.update((k, v) for k, v in md.items() if isinstance(k, str))
    for mime, name in REPR_METHODS:
        if mime in data:
            continue
        method = real_method(obj, name)
        if method is None:
            continue
        try:
            value, md = split_metadata(method())
        except Exception as exc:
            note(f"{type(obj).__name__}.{name} failed: {exc!r}")
            continue
        if value is None:
            continue
        data[mime] = value
        if md:
            metadata[mime] = md
    if "text/html" not in data and is_type(obj, "pandas", "Series"):
        # IPython shows a Series as text only; as a one-column table here.
        try:
            data["text/html"] = obj.to_frame()._repr_html_()
        except Exception:
            pass
    if "image/png" not in data and is_type(obj, "matplotlib", "Figure"):
        try:
            import io

            buf = io.BytesIO()
            obj.savefig(buf, format="png", bbox_inches="tight")
            data["image/png"] = buf.getvalue()
        except Exception as exc:
            note(f"could not render the figure: {exc!r}")
    if "text/plain" not in data:
        if text is None:
            try:
                text = repr(obj)
            except Exception as exc:
                note(f"repr() of {type(obj).__name__} failed: {exc!r}")
                text = f"<{type(obj).__name__} object>"
            text, _ = truncate_utf8(text, RESULT_REPR_LIMIT)
        data["text/plain"] = text
    return select_mimes(data, include, exclude), metadata


def select_mimes(data, include, exclude):
    if include:
        data = {k: v for k, v in data.items() if k in include}
    if exclude:
        data = {k: v for k, v in data.items() if k not in exclude}
    return data


def normalize_bundle(data):
    """The bundle as JSON takes it: images and PDFs as base64 text, other
    types as text, JSON types as JSON. What cannot be is dropped, said on
    stderr."""
    import base64

    out = {}
    for mime, value in data.items():
        try:
            if mime in BINARY_MIMES:
                if isinstance(value, (bytes, bytearray, memoryview)):
                    value = base64.b64encode(value).decode("ascii")
                elif not isinstance(value, str):  # IPython: a str is base64 already
                    raise TypeError(f"{type(value).__name__}, not bytes")
            elif mime == "application/json" or mime.endswith("+json"):
                if not isinstance(value, (dict, list)):
                    raise TypeError(f"{type(value).__name__}, not a dict or list")
            elif isinstance(value, (bytes, bytearray)):
                value = bytes(value).decode("utf-8", "replace")
            elif not isinstance(value, str):
                raise TypeError(f"{type(value).__name__}, not str")
        except Exception as exc:
            note(f"{mime} output dropped: {exc}")
            continue
        out[mime] = value
    return out


class OutputWriter(NumberedFiles):
    """Writes rich outputs as output-N.json in the figures dir, each with a
    "display" record (or the "result" record, for the last expression's
    value), and is the display() builtin."""

    kind = "rich output"

    def __init__(self, records, saver):
        super().__init__(records)
        self._saver = saver

    def write(self, data, metadata):
        """Write one bundle; returns its file's name, or None."""
        if self._dir is None:
            return None
        data = normalize_bundle(data)
        if not data:
            return None
        import json

        try:
            md = json.loads(json.dumps(metadata or {}, default=str))
        except Exception:
            md = {}
        try:
            body = json.dumps({"data": data, "metadata": md}, ensure_ascii=False,
                              allow_nan=False, default=str).encode("utf-8", "replace")
        except (TypeError, ValueError, RecursionError) as exc:
            note(f"output dropped: not JSON: {exc}")
            return None
        if len(body) > MAX_OUTPUT_BYTES:
            note(f"output of {len(body)} bytes dropped: the bound is {MAX_OUTPUT_BYTES} bytes")
            return None
        n = self._next()
        if n is None:
            return None
        name = f"output-{n}.json"
        path = os.path.join(self._dir, name)
        try:
            # Never follow or overwrite something user code put there.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            note(f"could not keep an output: {exc!r}")
            return None
        try:
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view):]
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        return name

    def result(self, value, text):
        """Write the last expression's bundle when it has more than
        text/plain (text); returns its file's name, or None."""
        try:
            if is_type(value, "matplotlib", "Figure") and self._saver.save_now(value):
                return None
            data, md = mime_bundle(value, text=text)
            if set(data) <= {"text/plain"}:
                return None
            return self.write(data, md)
        except Exception as exc:
            note(f"could not keep the result's rich output: {exc!r}")
            return None

    def display(self, *objs, include=None, exclude=None, metadata=None, raw=False, **kwargs):
        """Show objects as rich outputs, as IPython's display() does:
        each becomes an output of the run, in order, with the MIME types
        its _repr_*_ methods give (raw=True: each is a bundle already)."""
        for obj in objs:
            if raw:
                if not isinstance(obj, dict):
                    note(f"display(raw=True) takes dicts of MIME type to data, not {type(obj).__name__}")
                    continue
                data, md = select_mimes(obj, include, exclude), {}
            else:
                method = real_method(obj, "_ipython_display_")
                if method is not None:
                    method()
                    continue
                if is_type(obj, "matplotlib", "Figure") and self._saver.save_now(obj):
                    continue
                data, md = mime_bundle(obj, include, exclude)
            if metadata:
                md = {**md, **metadata}
            name = self.write(data, md)
            if name is not None:
                self._records.emit({"type": "display", "name": name})


def read_jobs():
    """Yield the jobs on fd 3, parsed, one per line; a job without "more"
    must be followed by EOF. Raises JobError on a malformed stream. fd 3 is
    closed before the last job runs; while a job with "more" runs it stays
    open (not inheritable) for the next one."""
    try:
        f = open(JOB_FD, "rb")
        os.set_inheritable(JOB_FD, False)
    except OSError as exc:
        raise JobError(f"cannot read fd {JOB_FD}: {exc}") from None
    try:
        while True:
            try:
                raw = f.readline(MAX_JOB_BYTES + 1)
            except OSError as exc:
                raise JobError(f"cannot read fd {JOB_FD}: {exc}") from None
            if len(raw) > MAX_JOB_BYTES:
                raise JobError(f"a job is larger than {MAX_JOB_BYTES} bytes")
            if not raw:
                return
            job = parse_job(raw[:-1] if raw.endswith(b"\n") else raw)
            if job.more:
                yield job
                continue
            try:
                rest = f.read(1)
            except OSError as exc:
                raise JobError(f"cannot read fd {JOB_FD}: {exc}") from None
            if rest:
                raise JobError("data after the last job")
            f.close()
            yield job
            return
    finally:
        f.close()


def parse_job(raw):
    try:
        job = json_loads(raw)
    except ValueError as exc:
        raise JobError(f"not JSON: {exc}") from None
    if not isinstance(job, dict):
        raise JobError("not a JSON object")

    def field(name, types_, default):
        value = job.get(name, default)
        # bool is an int subclass; never accept it as a number.
        if not isinstance(value, types_) or (isinstance(value, bool) and bool not in types_):
            raise JobError(f"bad {name!r}: {value!r}")
        return value

    env = field("env", (dict, type(None)), None) or {}
    if not all(isinstance(k, str) and isinstance(v, str) and "\0" not in k + v and "=" not in k for k, v in env.items()):
        raise JobError("bad 'env'")
    rlimits = field("rlimits", (dict, type(None)), None) or {}
    for name, pair in rlimits.items():
        if not (name.startswith("RLIMIT_") and isinstance(pair, list) and len(pair) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in pair)):
            raise JobError(f"bad rlimit {name!r}: {pair!r}")
    parsed = types.SimpleNamespace(
        env=env,
        rlimits=rlimits,
        code=field("code", (str, type(None)), None),
        filename=field("filename", (str,), "main.py"),
        last_line_interactive=field("last_line_interactive", (bool,), False),
        figures_dir=field("figures_dir", (str, type(None)), None),
        max_figures=field("max_figures", (int,), 16),
        max_outputs=field("max_outputs", (int,), 64),
        more=field("more", (bool,), False),
        session=field("session", (bool,), False),
        call=field("call", (int,), 0),
        stdin=field("stdin", (str, type(None)), None),
        cpu_s=field("cpu_s", (int, type(None)), None),
        exec=field("exec", (list, type(None)), None),
        records=field("records", (int, type(None)), None),
    )
    if parsed.exec is None and parsed.code is None:
        raise JobError("bad 'code': None")
    if parsed.exec is not None:
        argv = parsed.exec
        if (not argv or not all(isinstance(a, str) and "\0" not in a for a in argv)
                or not argv[0].startswith("/")):
            raise JobError(f"bad 'exec': {argv!r}")
        if parsed.more or parsed.session or parsed.code:
            raise JobError("an 'exec' job has no code and nothing may follow it")
    parsed.more = parsed.more or parsed.session
    if parsed.cpu_s is not None and parsed.cpu_s < 1:
        raise JobError(f"bad 'cpu_s': {parsed.cpu_s!r}")
    if not parsed.filename or "\0" in parsed.filename:
        raise JobError(f"bad 'filename': {parsed.filename!r}")
    if parsed.max_figures < 0:
        raise JobError(f"bad 'max_figures': {parsed.max_figures!r}")
    if parsed.max_outputs < 0:
        raise JobError(f"bad 'max_outputs': {parsed.max_outputs!r}")
    return parsed


def compile_job(source, filename, last_line_interactive):
    """Return (code to exec, code to eval for the result or None)."""
    if not last_line_interactive:
        return compile(source, filename, "exec", dont_inherit=True), None
    import ast  # only here: importing it costs ~10 ms at every start

    tree = ast.parse(source, filename)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    body = compile(tree, filename, "exec", dont_inherit=True)
    if last is not None:
        last = compile(last, filename, "eval", dont_inherit=True)
    return body, last


def strip_runner_frames(tb):
    """Drop the runner's own frames from the head of a traceback."""
    while tb is not None and tb.tb_frame.f_code.co_filename == RUNNER_FILE:
        tb = tb.tb_next
    return tb


def exception_record(exc, filename):
    cls = type(exc)
    exc_type = cls.__qualname__
    if cls.__module__ not in ("builtins", "__main__"):
        exc_type = f"{cls.__module__}.{exc_type}"
    try:
        message = str(exc)
    except Exception:
        message = "<exception str() failed>"
    message, _ = truncate_utf8(message, EXCEPTION_MESSAGE_LIMIT)

    line = None
    if isinstance(exc, SyntaxError) and exc.filename == filename:
        line = exc.lineno
    else:
        # The innermost frame that runs the user's file.
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == filename:
                line = tb.tb_lineno
            tb = tb.tb_next
    return {"type": "exception", "exc_type": exc_type, "message": message, "line": line}


def install_excepthook_filter():
    """Make the interpreter's report of an uncaught exception look like a
    plain script's: without the runner frames it propagated through."""
    # Imported here, before the exception reaches the interpreter: an import
    # inside the hook would make an uncaught KeyboardInterrupt exit 1
    # instead of by SIGINT. Not at start-up: it costs ~2 ms every run.
    import traceback

    user_hook = sys.excepthook
    if getattr(user_hook, "jaild_filter", False):
        return  # installed by an earlier job

    def excepthook(exc_type, exc, tb):
        tb = strip_runner_frames(tb)
        if user_hook is sys.__excepthook__:
            # The traceback module shows source lines from linecache, where
            # the user's code is; the C fallback of the default hook does not.
            traceback.print_exception(exc_type, exc, tb)
            return
        # Hooks written in C print the exception's own __traceback__, not tb.
        if isinstance(exc, BaseException):
            exc.__traceback__ = tb
        user_hook(exc_type, exc, tb)

    excepthook.jaild_filter = True
    sys.excepthook = excepthook


def run(job, records, saver, begin=None):
    """Run the job's code as __main__.  Exceptions, SystemExit included,
    propagate so that the interpreter reports them and sets the exit status
    exactly as it would for a script."""
    source, filename = job.code, job.filename
    # mtime None: linecache keeps the entry although no such file exists.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)

    # One __main__ for every job of the process: a later job sees what the
    # earlier ones defined and imported.
    global MAIN_MODULE
    module = MAIN_MODULE
    if module is None:
        module = MAIN_MODULE = types.ModuleType("__main__")
        module.__builtins__ = builtins
    module.__file__ = filename
    sys.modules["__main__"] = module
    sys.argv = [filename]
    # Imports resolve from the workspace, as they would from a script's dir.
    cwd = os.getcwd()
    if sys.path and sys.path[0] == os.path.dirname(RUNNER_FILE):
        sys.path[0] = cwd
    elif not sys.path or sys.path[0] != cwd:
        sys.path.insert(0, cwd)

    # Output goes out line by line, as on a terminal (a pipe's stdout would
    # be block-buffered): a streamed run's lines arrive as printed, and a
    # run killed at its timeout keeps what it printed. stderr is
    # line-buffered already.
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        try:
            reconfigure(line_buffering=True)
        except Exception:  # a stream user code put there
            pass

    try:
        if begin is not None:
            begin()  # inside the try: a SIGINT from here on is the job's
        body, last = compile_job(source, filename, job.last_line_interactive)
        exec(body, module.__dict__)
        if last is not None:
            value = eval(last, module.__dict__)
            if value is not None:
                text = repr(value)
                shown, truncated = truncate_utf8(text, RESULT_REPR_LIMIT)
                record = {"type": "result", "repr": shown, "truncated": truncated}
                if OUTPUTS is not None:
                    name = OUTPUTS.result(value, shown)
                    if name is not None:
                        record["name"] = name
                records.emit(record)
                print(text)
    except SystemExit:
        raise
    except BaseException as exc:
        records.emit(exception_record(exc, filename))
        install_excepthook_filter()
        raise
    finally:
        if job.session:
            # From here until the runner ignores SIGINT again, a late one
            # waits (and is then dropped): raised here, outside any try,
            # it would end the runner.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        saver.save_open_figures()
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except Exception:
                pass


# Modules the runner imports only when a run needs them (ast for
# last_line_interactive, traceback for an uncaught exception, ctypes at the
# end): a warm jail imports them ahead, with its pre-imports.
LAZY_MODULES = ("ast", "traceback", "ctypes")


def preimport():
    """In a warm jail (JAILD_PREIMPORT set, possibly empty), before any user
    code exists: import the runner's lazy modules and the comma-separated
    modules JAILD_PREIMPORT names, with fds 1 and 2 silenced (what imports
    print is not the user's output). A module that fails here fails again,
    visibly, when the user imports it. Returns whether this is a warm jail."""
    names = os.environ.pop("JAILD_PREIMPORT", None)
    if names is None:
        return False
    import importlib

    saved = (os.dup(1), os.dup(2))
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
    try:
        for name in LAZY_MODULES + tuple(n for n in names.split(",") if n):
            try:
                importlib.import_module(name)
            except Exception:
                pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
    return True


def apply_job_limits(job):
    """In the user's process, before its code: the job's environment, and
    its rlimits, which are at most the jail's (a warm jail was created with
    higher ones). Lowering cannot fail; if it does, no user code runs."""
    os.environ.update(job.env)
    if job.rlimits:
        for name, (soft, hard) in job.rlimits.items():
            which = getattr(resource, name)
            if which == resource.RLIMIT_CPU:
                # CPU time counts from the process's start, and a warm
                # jail's imports are not the run's: on a slow host they
                # alone used up a short run's budget (killed after 26 ms).
                # Whole seconds used so far are added, within the jail's
                # own hard limit.
                ru = resource.getrusage(resource.RUSAGE_SELF)
                used = int(ru.ru_utime + ru.ru_stime)
                cap = resource.getrlimit(which)[1]
                soft, hard = soft + used, hard + used
                if cap != resource.RLIM_INFINITY:
                    soft, hard = min(soft, cap), min(hard, cap)
            resource.setrlimit(which, (soft, hard))


def exec_job(job):
    """Replace this process with the job's command (its env and rlimits
    applied already): only fds 0-2 stay open, the signals Python ignores
    or this runner holds are as a fresh process has them, and the
    environment is the one the runner started with, plus the job's.
    Never returns."""
    env = dict(START_ENV)
    env.update(job.env)
    os.closerange(3, max(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 1024))
    for sig in (signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    try:
        os.execve(job.exec[0], job.exec, env)
    except OSError as exc:
        print(f"jaild runner: cannot execute {job.exec[0]}: {exc.strerror}", file=sys.stderr, flush=True)
    os._exit(127)


def apply_call_cpu(seconds):
    """A session's call: `seconds` more CPU seconds than the process used
    so far (the soft limit; the hard one, the jail's, stays)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    used = int(ru.ru_utime + ru.ru_stime)
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    soft = used + seconds
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def set_call_stdin(data):
    """A session's call reads its own stdin through sys.stdin (and input())."""
    import io

    raw = io.BytesIO((data or "").encode("latin-1"))
    sys.stdin = io.TextIOWrapper(raw, encoding=getattr(sys.__stdin__, "encoding", None) or "utf-8", errors="surrogateescape")


def exit_status(exc):
    """The exit status the interpreter gives an uncaught SystemExit, with
    its message on stderr as the interpreter prints it."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        # A C long long, truncated; -1 (255) when it does not fit.
        return code & 0xFF if -(1 << 63) <= code < 1 << 63 else 0xFF
    try:
        print(code, file=sys.stderr)
    except Exception:
        pass
    return 1


def shutdown():
    """What the interpreter does at exit before it tears its modules down:
    wait for non-daemon threads, run atexit callbacks, finalize the user's
    globals (an unclosed file is flushed), flush stdio. Returns False when
    stdout or stderr cannot be flushed (the interpreter then exits 120).

    The teardown itself is skipped (see exit_process): in a warm jail it
    would walk every object of the pre-imports (tens of ms for numpy,
    pandas and pyplot), and the process ends with the jail anyway."""
    global MAIN_MODULE
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException:
            pass
    import atexit

    atexit._run_exitfuncs()
    # Files the user never closed keep what was written to them: the
    # interpreter's module teardown would flush them (not always: io objects
    # collected as one cycle can be closed bottom-up and lose their buffers).
    flush_files()
    # The user's module goes as it would at interpreter exit: collected
    # whole, so that finalizers run while its globals are still there.
    MAIN_MODULE = None
    sys.modules.pop("__main__", None)
    # The user's objects only: what came before is frozen (main).
    gc.collect()
    flush_files()  # what finalizers wrote
    flushed = True
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and not stream.closed:
                stream.flush()
        except Exception as exc:
            flushed = False
            if stream is sys.stdout:  # an error flushing stderr goes unsaid
                report_unraisable(exc, "Exception ignored on flushing sys.stdout")
    # The original streams, if the user replaced them (the interpreter
    # flushes them when it frees them).
    for stream in (sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None and not stream.closed:
                stream.flush()
        except Exception:
            pass
    return flushed


def flush_files():
    """Flush every open writable file object the user's code made (only
    those are listed: what came before is frozen, see main)."""
    import io

    # type(), not isinstance(): isinstance falls back to an object's
    # __class__, which the user's code (or a library's lazy or deprecated
    # object: torch's warned) can make run code, warn or raise.
    kinds = (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom)
    writers = [o for o in gc.get_objects() if issubclass(type(o), kinds)]
    writers.sort(key=lambda o: not issubclass(type(o), io.TextIOWrapper))  # text layers first
    for f in writers:
        try:
            if not f.closed:
                f.flush()
        except Exception:
            pass


def exit_process(status):
    """Leave as a C program does after main: libc's exit flushes C stdio
    (what extensions printed with printf, C++ streams) and runs C atexit
    handlers, then the process ends, without the interpreter's teardown.
    Called holding the GIL (PyDLL), so no daemon thread runs Python
    meanwhile. Only native code loaded since the runner started (extension
    modules, ctypes) can have left either, so a process without any skips
    importing ctypes (~1.5 ms of a cold run)."""
    if not native_code_loaded():
        os._exit(status)
    try:
        import ctypes

        ctypes.PyDLL(None).exit(status)
    finally:
        os._exit(status)


def native_code_loaded():
    """Whether an extension module (a shared object: ctypes' own, cffi's,
    numpy's...) was imported since the runner started."""
    for name in set(sys.modules) - STARTUP_MODULES:
        spec = getattr(sys.modules.get(name), "__spec__", None)
        if str(getattr(spec, "origin", None) or "").endswith(".so"):
            return True
    return False


# What the interpreter and the runner imported before anything else (see main).
STARTUP_MODULES = frozenset()


def report_unraisable(exc, message):
    """Report an error nothing can catch, as the interpreter does at exit,
    straight to fd 2."""
    try:
        import traceback

        text = f"{message}:\n" + "".join(traceback.format_exception(exc))
        os.write(2, text.encode("utf-8", "backslashreplace"))
    except BaseException:
        pass


def run_user_process(records, saver):
    """In the user's process: read the jobs, apply the first one's limits,
    run them in order, and leave the way a script would. Never returns."""
    jobs = read_jobs()
    first = True
    user_sigint = signal.default_int_handler  # the user's, between calls
    while True:
        try:
            job = next(jobs, None)
        except JobError as exc:
            print(f"jaild runner: bad job: {exc}", file=sys.stderr, flush=True)
            os._exit(2)
        if job is None:
            if first:
                print("jaild runner: bad job: no job on fd 3", file=sys.stderr, flush=True)
                os._exit(2)
            finish(0, False)
        try:
            if first:
                apply_job_limits(job)
            else:
                os.environ.update(job.env)
        except (OSError, ValueError, AttributeError) as exc:
            print(f"jaild runner: cannot apply the run's limits: {exc}", file=sys.stderr, flush=True)
            os._exit(2)
        first = False
        if job.exec is not None:
            exec_job(job)
        saver.configure(job.figures_dir, job.max_figures, renumber=job.session)
        if OUTPUTS is not None:
            OUTPUTS.configure(job.figures_dir, job.max_outputs, renumber=job.session)
        if job.session:
            if job.records is not None:
                records.reattach(job.records)
            try:
                if job.cpu_s is not None:
                    apply_call_cpu(job.cpu_s)
                set_call_stdin(job.stdin)
            except (OSError, ValueError, UnicodeError) as exc:
                print(f"jaild runner: cannot prepare the call: {exc}", file=sys.stderr, flush=True)
                os._exit(2)

        def begin(job=job, sigint=user_sigint):
            if sigint is not None:  # None: a handler set from C stays
                signal.signal(signal.SIGINT, sigint)
            if job.session:
                # The daemon sends the call's SIGINT only after this: before
                # it the runner ignores SIGINT, which would lose it.
                records.emit({"type": "start", "call": job.call})

        status, interrupted, exited = run_and_report(job, records, saver, begin)
        user_sigint = signal.getsignal(signal.SIGINT)
        if job.session:
            # Between calls a SIGINT (the daemon's interrupt, late) must
            # not end the runner; the user's handler comes back next call.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
            records.emit({"type": "end", "status": status, "call": job.call})
            continue
        if exited or not job.more:
            finish(status, interrupted)
        records.emit({"type": "end", "status": status})


def run_and_report(job, records, saver, begin=None):
    """Run one job; report an uncaught exception as the interpreter would.
    Returns (status, interrupted by KeyboardInterrupt, ended by SystemExit)."""
    try:
        run(job, records, saver, begin)
    except SystemExit as exc:
        return exit_status(exc), False, True
    except BaseException as exc:
        # As the interpreter reports an uncaught exception (run() installed
        # the hook that drops the runner's frames).
        try:
            sys.excepthook(type(exc), exc, exc.__traceback__)
        except BaseException as hook_exc:
            try:
                import traceback

                print("Error in sys.excepthook:", file=sys.stderr)
                traceback.print_exception(type(hook_exc), hook_exc, strip_runner_frames(hook_exc.__traceback__))
                print("\nOriginal exception was:", file=sys.stderr)
                traceback.print_exception(type(exc), exc, strip_runner_frames(exc.__traceback__))
            except BaseException:
                pass
        try:
            sys.stderr.flush()
        except BaseException:
            pass
        return 1, isinstance(exc, KeyboardInterrupt), False
    return 0, False, False


def finish(status, interrupted):
    """Leave as the interpreter would after the last job. Never returns."""
    if not shutdown():
        status = 120
    if interrupted:
        # Like the interpreter: an uncaught KeyboardInterrupt ends the
        # process by SIGINT.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    exit_process(status)


# The environment the runner started with, but for its own variable: an
# "exec" job's command gets it (the runner adds matplotlib's).
START_ENV = {}


def main():
    global STARTUP_MODULES, START_ENV, OUTPUTS
    START_ENV = {k: v for k, v in os.environ.items() if k != "JAILD_PREIMPORT"}
    # Imported as a module by the daemon: a runner.py the user puts in the
    # workspace must import as theirs.
    if __name__ != "__main__":
        sys.modules.pop(__name__, None)
    STARTUP_MODULES = frozenset(sys.modules)
    # Until the user's code runs, a SIGINT (a session's interrupt sent as
    # the interpreter starts) must not end the runner.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    records = RecordWriter(RECORD_FD)
    saver = FigureSaver(records)
    prepare_matplotlib(saver)
    OUTPUTS = OutputWriter(records, saver)
    builtins.display = OUTPUTS.display
    warm = preimport()
    # Keep the cyclic GC off everything that exists before the user's code
    # (the pre-imports, in a warm jail): collections during the run and at
    # its end (see shutdown) then walk only the user's objects.
    gc.freeze()
    if warm:
        records.emit({"type": "ready"})
    run_user_process(records, saver)

if __name__ == "__main__":
    main()
