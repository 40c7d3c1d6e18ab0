"""Tests for runner.py: each test starts it as a subprocess the way the daemon
does, with the job on fd 3 and the records pipe on fd 4.

    python3 -m unittest discover -s rootfs/runner

JAILD_RUNNER selects the runner to test (default: runner.py beside this
file), e.g. /opt/jaild/runner.py inside the image.  The figure tests are
skipped where matplotlib is not importable.
"""

import fcntl
import importlib.util
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

RUNNER = os.environ.get("JAILD_RUNNER") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "runner.py")
# The jail's pid 1, which the runner runs under; built from init.c beside
# this file when unset (rootfs/test.sh sets it to the image's).
INIT = os.environ.get("JAILD_INIT")


def setUpModule():
    global INIT
    if INIT is None:
        out = tempfile.mkdtemp(prefix="jaild-init-")
        INIT = os.path.join(out, "init")
        source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "init.c")
        subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-o", INIT, source], check=True)
HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class Result:
    def __init__(self, returncode, stdout, stderr, records_raw):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        # Blank lines are allowed (init starts its record on a new line).
        self.records = [json.loads(line) for line in records_raw.splitlines() if line.strip()]

    def of_type(self, kind):
        return [r for r in self.records if r.get("type") == kind]


class RunnerTestCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="jaild-runner-test-")
        self.addCleanup(shutil.rmtree, self.tmp)
        self.workspace = os.path.join(self.tmp, "workspace")
        self.figures = os.path.join(self.tmp, "figures")
        os.mkdir(self.workspace)
        os.mkdir(self.figures)

    def run_job(self, code, raw_job=None, stdin=b"", runner_env=None, **job_fields):
        """Run the runner like the daemon does; return a Result."""
        job = {
            "code": code,
            "filename": "main.py",
            "last_line_interactive": False,
            "figures_dir": self.figures,
            "max_figures": 16,
        }
        job.update(job_fields)
        payload = raw_job if raw_job is not None else json.dumps(job).encode()

        job_r, job_w = os.pipe()
        rec_r, rec_w = os.pipe()

        def child_fds():
            # Move the pipe ends onto fds 3 and 4.  Copy them above 10 first so
            # that neither dup2 target can clobber the other source.
            high_job = fcntl.fcntl(job_r, fcntl.F_DUPFD, 10)
            high_rec = fcntl.fcntl(rec_w, fcntl.F_DUPFD, 10)
            os.dup2(high_job, 3)
            os.dup2(high_rec, 4)
            os.close(high_job)
            os.close(high_rec)

        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": self.tmp,
            "LANG": "C.UTF-8",
            "MPLCONFIGDIR": os.path.join(self.tmp, ".matplotlib"),
        }
        env.update(runner_env or {})
        proc = subprocess.Popen(
            # As the daemon starts it: imported from its directory.
            [INIT, sys.executable, "-s", "-B", "-c",
             f"import sys; sys.path[0] = {os.path.dirname(RUNNER)!r}; import runner; runner.main()"],
            cwd=self.workspace,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            close_fds=False,  # our pipe fds are non-inheritable; fds 3/4 are set up in child_fds
            preexec_fn=child_fds,
        )
        os.close(job_r)
        os.close(rec_w)

        records = []
        reader = threading.Thread(target=lambda: records.append(_read_all(rec_r)))
        reader.start()
        with os.fdopen(job_w, "wb") as f:
            f.write(payload)
        stdout, stderr = proc.communicate(stdin, timeout=120)
        reader.join()
        os.close(rec_r)
        return Result(proc.returncode, stdout.decode(), stderr.decode(), records[0].decode())

    def assertNoRunnerFrames(self, stderr):
        self.assertNotIn("runner.py", stderr)


def _read_all(fd):
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


class TestSuccess(RunnerTestCase):
    def test_plain_run(self):
        r = self.run_job("print('hello')\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "hello\n")
        self.assertEqual(r.records, [])

    def test_runs_as_main(self):
        r = self.run_job(
            "import sys\n"
            "if __name__ == '__main__':\n"
            "    print('main', sys.argv, __file__)\n"
        )
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "main ['main.py'] main.py\n")

    def test_pickle_class_from_main(self):
        r = self.run_job(
            "import pickle\n"
            "class Point:\n"
            "    def __init__(self, x): self.x = x\n"
            "print(pickle.loads(pickle.dumps(Point(7))).x)\n"
        )
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "7\n")

    def test_imports_module_from_workspace(self):
        with open(os.path.join(self.workspace, "helper.py"), "w") as f:
            f.write("VALUE = 41 + 1\n")
        r = self.run_job("import helper\nprint(helper.VALUE)\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "42\n")

    def test_stdout_is_line_buffered(self):
        code = "import sys\nprint(sys.stdout.line_buffering)\n"
        self.assertEqual(self.run_job(code).stdout, "True\n")
        r = self.run_job("import sys\nsys.stdout = None\nprint(1)\n")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_stdin_is_passed_through(self):
        r = self.run_job("import sys\nprint(sys.stdin.read().upper())\n", stdin=b"abc")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "ABC\n")

    def test_job_and_record_fds_not_inheritable(self):
        r = self.run_job(
            "import os\n"
            "try:\n"
            "    os.fstat(3)\n"
            "    print('fd 3 open')\n"
            "except OSError:\n"
            "    print('fd 3 closed')\n"
            "print('fd 4 inheritable:', os.get_inheritable(4))\n"
        )
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "fd 3 closed\nfd 4 inheritable: False\n")

    def test_inspect_getsource_sees_user_code(self):
        r = self.run_job("import inspect\ndef f():\n    return 1\nprint(inspect.getsource(f), end='')\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "def f():\n    return 1\n")


def own_sigign():
    """What this process ignores (/proc/self/status), for messages: its
    jobs' children must ignore none of it, since the image's init resets
    every disposition (under nohup or a CI shell that is SIGHUP, signal 32
    and more)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("SigIgn:"):
                return line.split()[1]
    return "?"


class TestExec(RunnerTestCase):
    """An "exec" job replaces the runner with a command (lint and format in
    a warm jail)."""

    def run_exec(self, argv, stdin=b"", **fields):
        job = {"exec": argv}
        job.update(fields)
        return self.run_job(None, raw_job=json.dumps(job).encode(), stdin=stdin)

    def test_command_gets_stdin_env_and_nothing_else(self):
        r = self.run_exec(
            ["/bin/sh", "-c", 'cat; echo "$GREETING ${JAILD_PREIMPORT-unset} ${MPLBACKEND-unset}"; '
             'grep -E "^Sig(Ign|Blk):" /proc/self/status; ls /proc/self/fd'],
            stdin=b"code\n", env={"GREETING": "hi"})
        self.assertEqual(r.returncode, 0, r.stderr)
        # fds 0-2 and ls's own directory; no signal blocked or ignored,
        # whatever this process ignores (init resets every disposition);
        # the environment the runner started with, and the job's.
        self.assertEqual(r.stdout, "code\nhi unset unset\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n0\n1\n2\n3\n",
                         f"this process ignores {own_sigign()}")
        self.assertEqual(r.records, [])

    def test_warm_runner_execs_too(self):
        # In a warm jail the runner imported its modules and said ready
        # first; SIGINT was ignored while it waited.
        job = json.dumps({"exec": ["/bin/sh", "-c", 'grep -E "^SigIgn:" /proc/self/status; echo "${JAILD_PREIMPORT-unset}"']})
        r = self.run_job(None, raw_job=job.encode(), runner_env={"JAILD_PREIMPORT": "json"})
        self.assertEqual((r.returncode, r.stdout), (0, "SigIgn:\t0000000000000000\nunset\n"),
                         f"{r.stderr} (this process ignores {own_sigign()})")
        self.assertEqual(r.records, [{"type": "ready"}])

    def test_rlimits_and_status(self):
        r = self.run_exec(["/bin/sh", "-c", "ulimit -n; exit 3"], rlimits={"RLIMIT_NOFILE": [64, 64]})
        self.assertEqual((r.returncode, r.stdout), (3, "64\n"), r.stderr)

    def test_missing_command(self):
        r = self.run_exec(["/nonexistent/ruff", "check"])
        self.assertEqual(r.returncode, 127)
        self.assertIn("cannot execute /nonexistent/ruff", r.stderr)

    def test_bad_exec_jobs_are_refused(self):
        for bad in ({"exec": []}, {"exec": ["ruff"]}, {"exec": ["/bin/true", 1]}, {"exec": "/bin/true"},
                    {"exec": ["/bin/true\u0000"]}, {"exec": ["/bin/true"], "code": "print(1)"},
                    {"exec": ["/bin/true"], "more": True}, {"exec": ["/bin/true"], "session": True}):
            with self.subTest(job=bad):
                r = self.run_job(None, raw_job=json.dumps(bad).encode())
                self.assertEqual(r.returncode, 2, (r.stdout, r.stderr))
                self.assertIn("bad job", r.stderr)


class TestJobLimits(RunnerTestCase):
    def test_rlimits_are_lowered_before_user_code(self):
        r = self.run_job(
            "import resource\nprint(resource.getrlimit(resource.RLIMIT_NOFILE), resource.getrlimit(resource.RLIMIT_FSIZE))\n",
            rlimits={"RLIMIT_NOFILE": [64, 64], "RLIMIT_FSIZE": [1 << 20, 1 << 20]},
        )
        self.assertEqual((r.returncode, r.stdout), (0, f"(64, 64) ({1 << 20}, {1 << 20})\n"), r.stderr)

    def test_user_code_cannot_raise_them_back(self):
        r = self.run_job(
            "import resource\ntry:\n    resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))\n    print('RAISED')\n"
            "except (ValueError, OSError):\n    print('refused')\n",
            rlimits={"RLIMIT_NOFILE": [64, 64]},
        )
        self.assertEqual(r.stdout, "refused\n", r.stderr)

    def test_env_is_applied(self):
        r = self.run_job("import os\nprint(os.environ['GREETING'])\n", env={"GREETING": "hi"})
        self.assertEqual((r.returncode, r.stdout), (0, "hi\n"), r.stderr)

    def test_bad_rlimits_refuse_the_job(self):
        for bad in ({"RLIMIT_AS": [1]}, {"NOFILE": [1, 1]}, {"RLIMIT_AS": [-1, 1]}, {"RLIMIT_AS": [True, 1]}):
            with self.subTest(rlimits=bad):
                r = self.run_job("print('RAN')\n", rlimits=bad)
                self.assertEqual(r.returncode, 2)
                self.assertNotIn("RAN", r.stdout)

    def test_preimport_before_the_job_and_silenced(self):
        r = self.run_job(
            "import os, sys\nprint('json' in sys.modules, 'JAILD_PREIMPORT' in os.environ)\n",
            runner_env={"JAILD_PREIMPORT": "json,nonexistent_module_xyz"},
        )
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "True False\n", ""))
        self.assertEqual(r.records[0], {"type": "ready"})

    def test_no_memory_shared_with_init(self):
        # The user's code runs in the process that imported everything; its
        # parent is init, not a Python process whose pages it would share
        # copy-on-write.
        r = self.run_job(
            "import os\nprint(os.readlink(f'/proc/{os.getppid()}/exe') == os.readlink('/proc/self/exe'))\n",
            runner_env={"JAILD_PREIMPORT": "sqlite3"},
        )
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "False\n", ""))


class TestExceptions(RunnerTestCase):
    def test_exception_record_and_traceback(self):
        r = self.run_job("x = 1\ny = 0\nprint(x / y)\n")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(
            r.of_type("exception"),
            [{"type": "exception", "exc_type": "ZeroDivisionError", "message": "division by zero", "line": 3}],
        )
        self.assertTrue(r.stderr.startswith("Traceback (most recent call last):\n"), r.stderr)
        self.assertIn('  File "main.py", line 3, in <module>\n    print(x / y)\n', r.stderr)
        self.assertTrue(r.stderr.endswith("ZeroDivisionError: division by zero\n"), r.stderr)
        self.assertNoRunnerFrames(r.stderr)

    def test_line_is_innermost_user_frame(self):
        r = self.run_job(
            "import json\n"
            "def parse(s):\n"
            "    return json.loads(s)\n"
            "parse('{')\n"
        )
        self.assertEqual(r.returncode, 1)
        (record,) = r.of_type("exception")
        self.assertEqual(record["exc_type"], "json.decoder.JSONDecodeError")
        self.assertEqual(record["line"], 3)
        self.assertNoRunnerFrames(r.stderr)

    def test_syntax_error(self):
        r = self.run_job("x = 1\ny = (\n")
        self.assertEqual(r.returncode, 1)
        (record,) = r.of_type("exception")
        self.assertEqual(record["exc_type"], "SyntaxError")
        self.assertEqual(record["line"], 2)
        self.assertNotIn("Traceback", r.stderr)
        self.assertIn('File "main.py", line 2', r.stderr)
        self.assertNoRunnerFrames(r.stderr)

    def test_syntax_error_interactive(self):
        r = self.run_job("x = 1\nreturn x\n", last_line_interactive=True)
        self.assertEqual(r.returncode, 1)
        (record,) = r.of_type("exception")
        self.assertEqual((record["exc_type"], record["line"]), ("SyntaxError", 2))

    def test_user_excepthook_is_honoured(self):
        r = self.run_job(
            "import sys\n"
            "sys.excepthook = lambda t, e, tb: print('hooked', t.__name__, tb.tb_frame.f_code.co_filename)\n"
            "raise ValueError('x')\n"
        )
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stdout, "hooked ValueError main.py\n")

    def test_keyboard_interrupt_exits_like_python(self):
        r = self.run_job("raise KeyboardInterrupt\n")
        self.assertIn(r.returncode, (-signal.SIGINT, 128 + signal.SIGINT))
        (record,) = r.of_type("exception")
        self.assertEqual((record["exc_type"], record["line"]), ("KeyboardInterrupt", 1))
        self.assertIn("KeyboardInterrupt", r.stderr)
        self.assertNoRunnerFrames(r.stderr)


class TestExit(RunnerTestCase):
    def test_death_by_signal_is_reported(self):
        # The user's code runs in the runner, a child of init (pid 1 in a
        # jail), so a signal ends it even when pid 1 would be immune; init
        # says which.
        r = self.run_job("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
        self.assertEqual(r.returncode, 128 + signal.SIGKILL)
        self.assertEqual(r.of_type("exit"), [{"type": "exit", "signal": signal.SIGKILL}])

    def test_sys_exit_code(self):
        r = self.run_job("import sys\nprint('before')\nsys.exit(3)\n")
        self.assertEqual(r.returncode, 3)
        self.assertEqual(r.stdout, "before\n")
        self.assertEqual(r.records, [])
        self.assertEqual(r.stderr, "")

    def test_sys_exit_message(self):
        r = self.run_job("raise SystemExit('bye')\n")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, "bye\n")
        self.assertEqual(r.records, [])

    def test_sys_exit_none(self):
        r = self.run_job("import sys\nsys.exit()\n")
        self.assertEqual((r.returncode, r.records), (0, []))

    def test_exit_finalizes_like_the_interpreter(self):
        # The user's process leaves without tearing the interpreter down,
        # but what a script sees at exit still happens, in the same order.
        r = self.run_job(
            "import atexit, threading, time\n"
            "class A:\n"
            "    def __del__(self):\n"
            "        print('finalized', X)\n"
            "def late():\n"
            "    time.sleep(0.2)\n"
            "    print('thread')\n"
            "X = 1\n"
            "a = A()\n"
            "f = open('unclosed.txt', 'w')\n"
            "f.write('kept')\n"
            "threading.Thread(target=late).start()\n"
            "atexit.register(lambda: print('atexit'))\n"
        )
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertEqual(r.stdout, "thread\natexit\nfinalized 1\n")
        with open(os.path.join(self.workspace, "unclosed.txt")) as f:
            self.assertEqual(f.read(), "kept")

    def test_unclosed_file_without_cycles(self):
        r = self.run_job("f = open('plain.txt', 'w')\nf.write('x' * 10)\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.workspace, "plain.txt")) as f:
            self.assertEqual(f.read(), "x" * 10)

    def test_c_stdio_flushed_at_exit(self):
        # printf from C into a pipe is buffered by libc until exit.
        r = self.run_job("import ctypes\nctypes.CDLL(None).printf(b'from C\\n')\n")
        self.assertEqual((r.returncode, r.stdout), (0, "from C\n"), r.stderr)

    def test_user_module_named_like_the_runner(self):
        with open(os.path.join(self.workspace, "runner.py"), "w") as f:
            f.write("X = 42\n")
        r = self.run_job("import runner\nprint(runner.X)\n")
        self.assertEqual((r.returncode, r.stdout), (0, "42\n"), r.stderr)

    def test_failing_excepthook(self):
        r = self.run_job(
            "import sys\n"
            "def h(*a): raise RuntimeError('hook')\n"
            "sys.excepthook = h\n"
            "raise ValueError('orig')\n"
        )
        self.assertEqual(r.returncode, 1)
        for part in ("Error in sys.excepthook:", "RuntimeError: hook", "Original exception was:", "ValueError: orig"):
            self.assertIn(part, r.stderr)
        self.assertNoRunnerFrames(r.stderr)

    def test_stdout_flush_failure_at_exit(self):
        r = self.run_job(
            "import sys\n"
            "class W:\n"
            "    closed = False\n"
            "    def write(self, s): pass\n"
            "    def flush(self): raise OSError('no')\n"
            "sys.stdout = W()\n"
        )
        self.assertEqual(r.returncode, 120)
        self.assertIn("Exception ignored", r.stderr)
        self.assertIn("OSError: no", r.stderr)

    def test_sys_exit_large_and_negative(self):
        for code, want in ((256 + 7, 7), (-1, 255), (1 << 64, 255)):
            with self.subTest(code=code):
                r = self.run_job(f"raise SystemExit({code})\n")
                self.assertEqual(r.returncode, want)

    def test_malformed_job(self):
        for raw in (b"{not json", b"[]", json.dumps({"filename": "x.py"}).encode(),
                    json.dumps({"code": "1", "max_figures": True}).encode()):
            with self.subTest(raw=raw):
                r = self.run_job("", raw_job=raw)
                self.assertEqual(r.returncode, 2)
                self.assertIn("bad job", r.stderr)

    def test_user_closes_records_fd_and_replaces_stdout(self):
        r = self.run_job(
            "import io, os, sys\n"
            "os.close(4)\n"
            "f = open('mine.txt', 'w')\n"
            "os.dup2(f.fileno(), 4)\n"
            "sys.stdout = io.StringIO()\n"
            "x\n",
            last_line_interactive=True,
        )
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.records, [])
        self.assertIn("NameError: name 'x' is not defined", r.stderr)
        with open(os.path.join(self.workspace, "mine.txt")) as f:
            self.assertEqual(f.read(), "")


class TestInteractive(RunnerTestCase):
    def test_result_of_last_expression(self):
        r = self.run_job("a = 6\na * 7\n", last_line_interactive=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "42\n")
        self.assertEqual(r.records, [{"type": "result", "repr": "42", "truncated": False}])

    def test_none_is_not_shown(self):
        r = self.run_job("print('x')\n", last_line_interactive=True)
        self.assertEqual((r.stdout, r.records), ("x\n", []))

    def test_not_interactive(self):
        r = self.run_job("6 * 7\n")
        self.assertEqual((r.stdout, r.records), ("", []))

    def test_last_statement_not_expression(self):
        r = self.run_job("x = 6 * 7\n", last_line_interactive=True)
        self.assertEqual((r.returncode, r.stdout, r.records), (0, "", []))

    def test_long_repr_is_truncated(self):
        r = self.run_job("'é' * 100000\n", last_line_interactive=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        (record,) = r.of_type("result")
        self.assertTrue(record["truncated"])
        self.assertLessEqual(len(record["repr"].encode()), 64 * 1024)
        self.assertEqual(len(r.stdout), 100000 + 3)  # full repr, quotes and newline

    def test_exception_in_last_expression(self):
        r = self.run_job("x = 1\n\nx + 'a'\n", last_line_interactive=True)
        self.assertEqual(r.returncode, 1)
        (record,) = r.of_type("exception")
        self.assertEqual((record["exc_type"], record["line"]), ("TypeError", 3))
        self.assertNoRunnerFrames(r.stderr)


@unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is not importable")
class TestFigures(RunnerTestCase):
    def assertPng(self, name):
        with open(os.path.join(self.figures, name), "rb") as f:
            self.assertEqual(f.read(8), PNG_SIGNATURE)

    def test_open_figure_saved_at_end(self):
        r = self.run_job("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.records, [{"type": "figure", "name": "figure-1.png",
                                      "text": "<Figure size 640x480 with 1 Axes>"}])
        self.assertPng("figure-1.png")

    def test_show_saves_and_closes(self):
        r = self.run_job(
            "from matplotlib.pyplot import figure, plot, show, get_fignums\n"
            "plot([1, 2]); show()\n"
            "figure(); plot([3, 4]); show()\n"
            "print(get_fignums())\n"
        )
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "[]\n")
        self.assertEqual([rec["name"] for rec in r.of_type("figure")], ["figure-1.png", "figure-2.png"])
        self.assertPng("figure-2.png")
        self.assertNotIn("non-interactive", r.stderr)

    def test_figure_saved_after_exception(self):
        r = self.run_job("import matplotlib.pyplot as plt\nplt.plot([1, 2])\n1 / 0\n")
        self.assertEqual(r.returncode, 1)
        self.assertEqual([rec["type"] for rec in r.records], ["exception", "figure"])
        self.assertPng("figure-1.png")

    def test_max_figures(self):
        r = self.run_job(
            "import matplotlib.pyplot as plt\nfor i in range(3):\n    plt.figure()\n",
            max_figures=2,
        )
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(r.of_type("figure")), 2)
        self.assertEqual(sorted(os.listdir(self.figures)), ["figure-1.png", "figure-2.png"])
        self.assertIn("figure limit (2) reached", r.stderr)

    def test_backend_is_agg(self):
        r = self.run_job("import matplotlib\nprint(matplotlib.get_backend())\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip().lower(), "agg")


HAVE_PANDAS = importlib.util.find_spec("pandas") is not None


class TestRichOutputs(RunnerTestCase):
    """display() and the last expression's MIME bundle, as IPython makes
    them, written as output-N.json with their records."""

    def output(self, name):
        with open(os.path.join(self.figures, name), "rb") as f:
            return json.loads(f.read())

    def displayed(self, r):
        self.assertEqual(r.returncode, 0, r.stderr)
        return [self.output(rec["name"]) for rec in r.of_type("display")]

    def test_repr_methods_in_order(self):
        r = self.run_job(
            "class Rich:\n"
            "    def _repr_html_(self): return '<b>hi</b>'\n"
            "    def _repr_markdown_(self): return '**hi**'\n"
            "    def _repr_svg_(self): return '<svg/>'\n"
            "    def _repr_png_(self): return b'\\x89PNG\\r\\n\\x1a\\nxx'\n"
            "    def _repr_latex_(self): return ('$x$', {'k': 1})\n"
            "    def _repr_json_(self): return {'a': [1, 2]}\n"
            "    def __repr__(self): return 'Rich()'\n"
            "display(Rich(), 'text')\n"
        )
        (rich, text) = self.displayed(r)
        self.assertEqual(rich["data"], {
            "text/html": "<b>hi</b>", "text/markdown": "**hi**", "image/svg+xml": "<svg/>",
            "image/png": "iVBORw0KGgp4eA==", "text/latex": "$x$", "application/json": {"a": [1, 2]},
            "text/plain": "Rich()",
        })
        self.assertEqual(rich["metadata"], {"text/latex": {"k": 1}})
        self.assertEqual(text["data"], {"text/plain": "'text'"})
        self.assertEqual([rec["name"] for rec in r.of_type("display")], ["output-1.json", "output-2.json"])

    def test_mimebundle_first_and_include_exclude(self):
        r = self.run_job(
            "class B:\n"
            "    def _repr_mimebundle_(self, include=None, exclude=None):\n"
            "        return {'text/html': '<i>b</i>', 'application/vnd.custom+json': {'x': 1}}, {'text/html': {'isolated': True}}\n"
            "    def _repr_html_(self): return 'not used'\n"
            "    def _repr_markdown_(self): return 'md'\n"
            "display(B())\n"
            "display(B(), exclude=['text/markdown'])\n"
            "display(B(), include=['text/plain'])\n"
        )
        full, no_md, plain = self.displayed(r)
        self.assertEqual(full["data"]["text/html"], "<i>b</i>")
        self.assertEqual(full["data"]["application/vnd.custom+json"], {"x": 1})
        self.assertEqual(full["data"]["text/markdown"], "md")
        self.assertEqual(full["metadata"], {"text/html": {"isolated": True}})
        self.assertNotIn("text/markdown", no_md["data"])
        self.assertEqual(list(plain["data"]), ["text/plain"])

    def test_failing_and_wrong_reprs_are_dropped(self):
        r = self.run_job(
            "class Bad:\n"
            "    def _repr_html_(self): raise ValueError('no')\n"
            "    def _repr_png_(self): return 'not bytes but str: taken as base64'\n"
            "    def _repr_json_(self): return 42\n"
            "    def _repr_markdown_(self): return None\n"
            "    def __repr__(self): return 'Bad()'\n"
            "class Everything:\n"
            "    def __getattr__(self, name): return lambda *a, **k: '<b>claims all</b>'\n"
            "    def __repr__(self): return 'Everything()'\n"
            "display(Bad(), Everything(), Bad)\n"
        )
        bad, everything, cls = self.displayed(r)
        self.assertEqual(bad["data"], {"image/png": "not bytes but str: taken as base64", "text/plain": "Bad()"})
        self.assertIn("_repr_html_ failed: ValueError('no')", r.stderr)
        self.assertIn("application/json output dropped", r.stderr)
        self.assertEqual(everything["data"], {"text/plain": "Everything()"})
        self.assertEqual(list(cls["data"]), ["text/plain"])

    def test_ipython_display_and_raw(self):
        r = self.run_job(
            "class D:\n"
            "    def _ipython_display_(self): display({'text/markdown': '# hi'}, raw=True)\n"
            "display(D())\n"
            "display({'text/plain': 'p', 'image/svg+xml': '<svg/>'}, raw=True, include=['image/svg+xml'])\n"
        )
        md, svg = self.displayed(r)
        self.assertEqual(md["data"], {"text/markdown": "# hi"})
        self.assertEqual(svg["data"], {"image/svg+xml": "<svg/>"})

    def test_last_expression_bundle(self):
        r = self.run_job(
            "class H:\n"
            "    def _repr_html_(self): return '<p>h</p>'\n"
            "    def __repr__(self): return 'H()'\n"
            "H()\n",
            last_line_interactive=True,
        )
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "H()\n")
        (rec,) = r.records
        self.assertEqual(rec, {"type": "result", "repr": "H()", "truncated": False, "name": "output-1.json"})
        self.assertEqual(self.output("output-1.json")["data"], {"text/html": "<p>h</p>", "text/plain": "H()"})

    def test_plain_last_expression_writes_no_file(self):
        r = self.run_job("6 * 7\n", last_line_interactive=True)
        self.assertEqual(r.records, [{"type": "result", "repr": "42", "truncated": False}])
        self.assertEqual(os.listdir(self.figures), [])

    def test_limits(self):
        r = self.run_job(
            "for i in range(3):\n    display({'text/plain': str(i)}, raw=True)\n"
            "display({'text/plain': 'x' * (9 << 20)}, raw=True)\n",
            max_outputs=2,
        )
        self.assertEqual(len(self.displayed(r)), 2)
        self.assertIn("rich output limit (2) reached, further rich outputs are not kept", r.stderr)
        r = self.run_job("display({'text/plain': 'x' * (9 << 20)}, raw=True)\n")
        self.assertEqual(self.displayed(r), [])
        self.assertIn("bytes dropped: the bound is 8388608 bytes", r.stderr)

    def test_never_follows_a_planted_link(self):
        target = os.path.join(self.tmp, "target")
        os.symlink(target, os.path.join(self.figures, "output-1.json"))
        r = self.run_job("display({'text/plain': 'x'}, raw=True)\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(os.path.exists(target))
        self.assertEqual(r.of_type("display"), [])
        self.assertIn("could not keep an output", r.stderr)

    @unittest.skipUnless(HAVE_PANDAS, "pandas is not importable")
    def test_dataframe_and_series(self):
        r = self.run_job(
            "import pandas as pd\n"
            "df = pd.DataFrame({'a': [1, 2]})\n"
            "display(df['a'])\n"
            "df\n",
            last_line_interactive=True,
        )
        (series,) = self.displayed(r)
        self.assertIn("<table", series["data"]["text/html"])
        self.assertIn("Name: a", series["data"]["text/plain"])
        (result,) = r.of_type("result")
        frame = self.output(result["name"])
        self.assertIn("<table", frame["data"]["text/html"])
        self.assertEqual(frame["data"]["text/plain"], result["repr"])

    @unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is not importable")
    def test_figures_in_order(self):
        r = self.run_job(
            "import matplotlib.pyplot as plt\n"
            "from matplotlib.figure import Figure\n"
            "fig = plt.figure(); plt.plot([1, 2])\n"
            "display('before')\n"
            "display(fig)\n"
            "display(Figure())\n"
            "plt.figure()\n"
            "fig\n",
            last_line_interactive=True,
        )
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([(rec["type"], rec.get("name")) for rec in r.records], [
            ("display", "output-1.json"), ("figure", "figure-1.png"), ("display", "output-2.json"),
            ("result", "output-3.json"), ("figure", "figure-2.png"),
        ])
        self.assertTrue(self.output("output-2.json")["data"]["image/png"].startswith("iVBORw0KGgo"))
        # fig, closed by display(fig), is no longer pyplot's: rendered.
        result = self.output("output-3.json")["data"]
        self.assertTrue(result["image/png"].startswith("iVBORw0KGgo"))
        self.assertEqual(result["text/plain"], "<Figure size 640x480 with 1 Axes>")


def load_runner_module():
    spec = importlib.util.spec_from_file_location("jaild_runner", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TestManyJobs(RunnerTestCase):
    """Jobs with "more" run in order in one process, each ended by an "end"
    record; the last job (or EOF) ends the process as a script would."""

    def jobs(self, *specs):
        lines = []
        for code, more in specs:
            job = {"code": code, "filename": "main.py", "last_line_interactive": False,
                   "figures_dir": self.figures, "max_figures": 16}
            if more:
                job["more"] = True
            lines.append(json.dumps(job))
        return "\n".join(lines).encode()

    def test_jobs_share_globals_and_imports(self):
        r = self.run_job("", raw_job=self.jobs(("import math\nx = 41", True), ("print(x + 1, math.pi > 3)", False)))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "42 True\n")
        self.assertEqual(r.of_type("end"), [{"type": "end", "status": 0}])

    def test_exception_ends_only_its_job(self):
        r = self.run_job("", raw_job=self.jobs(("1/0", True), ("raise KeyboardInterrupt", True), ("print('alive')", False)))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "alive\n")
        self.assertEqual([e["status"] for e in r.of_type("end")], [1, 1])
        self.assertEqual([e["exc_type"] for e in r.of_type("exception")], ["ZeroDivisionError", "KeyboardInterrupt"])
        self.assertIn("ZeroDivisionError", r.stderr)
        self.assertNoRunnerFrames(r.stderr)
        # The exception record of a job comes before its end record.
        kinds = [rec["type"] for rec in r.records]
        self.assertEqual(kinds, ["exception", "end", "exception", "end"])

    def test_sys_exit_ends_the_process(self):
        r = self.run_job("", raw_job=self.jobs(("print('one')", True), ("raise SystemExit(3)", True), ("print('never')", False)))
        self.assertEqual(r.returncode, 3)
        self.assertEqual(r.stdout, "one\n")
        self.assertEqual(len(r.of_type("end")), 1)

    def test_eof_after_a_job_with_more(self):
        r = self.run_job("", raw_job=self.jobs(("print('only')", True)) + b"\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "only\n")
        self.assertEqual(len(r.of_type("end")), 1)

    def test_nothing_may_follow_the_last_job(self):
        for raw in (self.jobs(("print(1)", False)) + b"\n{}", self.jobs(("print(1)", False), ("print(2)", False))):
            with self.subTest(raw=raw):
                r = self.run_job("", raw_job=raw)
                self.assertEqual(r.returncode, 2)
                self.assertIn("bad job", r.stderr)
                self.assertEqual(r.stdout, "")

    def test_a_single_job_with_a_newline(self):
        r = self.run_job("", raw_job=self.jobs(("print('hi')", False)) + b"\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "hi\n")
        self.assertEqual(r.records, [])

    def test_no_job(self):
        r = self.run_job("", raw_job=b"")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no job", r.stderr)


class TestCodec(unittest.TestCase):
    """The runner reads the job and writes records without the json module
    (see json_codec); what it reads and writes must be json's."""

    def setUp(self):
        self.runner = load_runner_module()

    def test_loads_matches_json(self):
        for text in (
            '{"code": "print(1)\\n", "env": {"A": "\\u00e9\\ud83d\\ude00"}, "rlimits": {"RLIMIT_AS": [1, 18446744073709551615]}}',
            ' {"a": [true, false, null, -1.5e3, {}]} \n',
            '"\\u003chtml\\u003e"',
        ):
            with self.subTest(text=text):
                self.assertEqual(self.runner.json_loads(text.encode()), json.loads(text))

    def test_loads_rejects_what_json_rejects(self):
        for text in ("{not json", '{"a": 1} x', "", "[1,]", '{"a": "\\x"}'):
            with self.subTest(text=text), self.assertRaises(ValueError):
                self.runner.json_loads(text.encode())

    def test_dumps_matches_json(self):
        for record in (
            {"type": "ready"},
            {"type": "exception", "exc_type": "E", "message": "\u00e9\ud800\n\"\\<", "line": None},
            {"type": "result", "repr": "x" * 10, "truncated": False},
            {"type": "exit", "signal": 9, "big": 1 << 70, "flag": True},
        ):
            with self.subTest(record=record):
                self.assertEqual(self.runner.json_dumps(record), json.dumps(record))


class TestStartup(RunnerTestCase):
    def test_startup_imports_stay_light(self):
        # What the runner imports before the user's code is paid by every
        # cold run; json, re, enum and signal together cost ~13 ms. Only
        # what the modules the runner needs pull in may be there.
        heavy = {"json", "re", "enum", "signal"}
        probe = "import sys; print(sorted(%r & set(sys.modules)))" % heavy
        needed = subprocess.run(
            [sys.executable, "-s", "-B", "-c", "import builtins, gc, linecache, os, types; " + probe],
            capture_output=True, text=True, check=True,
        ).stdout
        r = self.run_job(probe + "\n")
        self.assertEqual((r.returncode, r.stdout), (0, needed), r.stderr)


# How long any one read from a session jail may take before the test fails.
SESSION_DEADLINE = 5.0
_PID_NAMESPACE = None  # the unshare command line that works here, or []


def pid_namespace_prefix():
    """A command prefix that runs a program as pid 1 of a new pid namespace
    (with its own /proc), or None. init's session mode kills every process
    it can (kill(-1)), so its tests never run it in the test's own namespace."""
    global _PID_NAMESPACE
    if _PID_NAMESPACE is None:
        _PID_NAMESPACE = []
        base = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"]
        for prefix in (base, base[:1] + ["--user", "--map-root-user"] + base[1:]):
            try:
                probe = subprocess.run(prefix + ["sh", "-c", "test $$ = 1"], capture_output=True, timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if probe.returncode == 0:
                _PID_NAMESPACE = prefix
                break
    return _PID_NAMESPACE or None


class LineReader:
    """Reads lines from a pipe, each within a deadline."""

    def __init__(self, fd, name):
        self.fd, self.name = fd, name
        self.buf = b""
        self.eof = False

    def _fill(self, timeout):
        """Read what arrives within timeout; False if nothing did."""
        if self.eof:
            return False
        ready, _, _ = select.select([self.fd], [], [], max(timeout, 0))
        if not ready:
            return False
        chunk = os.read(self.fd, 65536)
        if not chunk:
            self.eof = True
        self.buf += chunk
        return True

    def readline(self, timeout=SESSION_DEADLINE):
        """The next line without its newline; None at EOF. Fails the test
        when nothing comes within timeout."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf and not self.eof:
            if not self._fill(deadline - time.monotonic()) and time.monotonic() >= deadline:
                raise AssertionError(f"{self.name}: no line within {timeout}s (have {self.buf!r})")
        if b"\n" in self.buf:
            line, _, self.buf = self.buf.partition(b"\n")
            return line.decode()
        line, self.buf = self.buf, b""
        return line.decode() if line else None

    def pending(self, wait=0.0):
        """Whole lines that arrive within wait seconds (none expected: a
        short wait; they are returned to be checked)."""
        deadline = time.monotonic() + wait
        while self._fill(deadline - time.monotonic()):
            if self.eof:
                break
        lines = self.buf.split(b"\n")
        self.buf = lines.pop() if not self.eof else b""
        return [line.decode() for line in lines if line]

    def read_to_eof(self, timeout=SESSION_DEADLINE):
        deadline = time.monotonic() + timeout
        while not self.eof:
            if not self._fill(deadline - time.monotonic()) and time.monotonic() >= deadline:
                raise AssertionError(f"{self.name}: no EOF within {timeout}s")
        data, self.buf = self.buf, b""
        return data.decode()


class SessionJail:
    """init and the runner as a session jail has them: pid 1 of a pid
    namespace of their own, jobs on fd 3, records on fd 4, and init's
    CONTROL (fd 5, written here) and STATUS (fd 6, read here) pipes."""

    def __init__(self, test, prefix, stdin=b""):
        self.test = test
        self.calls = 0
        self.stdout_path = os.path.join(test.tmp, "stdout")
        self.stderr_path = os.path.join(test.tmp, "stderr")
        self.stdout_seen = 0
        job_r, self.job_w = os.pipe()
        rec_r, rec_w = os.pipe()
        ctl_r, self.ctl_w = os.pipe()
        st_r, st_w = os.pipe()
        ends = (job_r, rec_w, ctl_r, st_w)  # onto fds 3, 4, 5, 6

        def child_fds():
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 20) for fd in ends]
            for target, fd in enumerate(high, 3):
                os.dup2(fd, target)
                os.close(fd)

        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": test.tmp,
            "LANG": "C.UTF-8",
            "MPLCONFIGDIR": os.path.join(test.tmp, ".matplotlib"),
        }
        stdin_r, stdin_w = os.pipe()
        os.write(stdin_w, stdin)  # the jail's fd 0; calls must not read it
        os.close(stdin_w)
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                prefix + [INIT, sys.executable, "-s", "-B", "-c",
                          f"import sys; sys.path[0] = {os.path.dirname(RUNNER)!r}; import runner; runner.main()"],
                cwd=test.workspace,
                env=env,
                stdin=stdin_r,
                stdout=out,
                stderr=err,
                close_fds=False,  # the pipes are non-inheritable; fds 3-6 are set up in child_fds
                preexec_fn=child_fds,
            )
        for fd in ends + (stdin_r,):
            os.close(fd)
        self.records = LineReader(rec_r, "records")
        self.status = LineReader(st_r, "status")
        test.addCleanup(self.close)

    def close(self):
        for fd in (self.ctl_w, self.job_w):
            if fd is not None:
                os.close(fd)
        self.ctl_w = self.job_w = None
        try:
            self.proc.wait(timeout=SESSION_DEADLINE)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # unshare --kill-child takes init, and so the namespace, with it
            self.proc.wait()
        for reader in (self.records, self.status):
            if reader.fd is not None:
                os.close(reader.fd)
                reader.fd = None

    def command(self, cmds):
        os.write(self.ctl_w, cmds.encode())

    def close_control(self):
        os.close(self.ctl_w)
        self.ctl_w = None

    def write_job(self, job, last=False):
        os.write(self.job_w, json.dumps(job).encode() + b"\n")
        if last:  # nothing may follow a job without "more" but EOF
            os.close(self.job_w)
            self.job_w = None

    def submit(self, code, **fields):
        """Send a call; returns its number."""
        self.calls += 1
        job = {"code": code, "filename": f"call-{self.calls}.py", "last_line_interactive": False,
               "figures_dir": self.test.figures, "max_figures": 16, "session": True, "call": self.calls}
        job.update(fields)
        self.write_job(job)
        return self.calls

    def next_record(self, timeout=SESSION_DEADLINE):
        while True:
            line = self.records.readline(timeout)
            if line is None:
                raise AssertionError(f"records: EOF; stderr: {self.stderr()!r}")
            if line.strip():
                return json.loads(line)

    def records_to_end(self):
        """The records up to and including the next end record, without
        the call's start record, which must come first when the call's
        code ran (not after a malformed job or a crash before it)."""
        got = []
        while not got or got[-1].get("type") != "end":
            got.append(self.next_record())
        # A killed call's start may come first; the daemon tells them apart
        # by the call number.
        mine = [i for i, r in enumerate(got) if r == {"type": "start", "call": got[-1].get("call")}]
        self.test.assertLessEqual(len(mine), 1, got)
        if mine:
            self.test.assertTrue(all(r.get("type") == "start" for r in got[: mine[0]]), got)
        return [r for r in got if r.get("type") != "start"]

    def call(self, code, **fields):
        """Run a call to its end; returns (records, end record, new stdout)."""
        n = self.submit(code, **fields)
        recs = self.records_to_end()
        end = recs.pop()
        self.test.assertEqual(end.get("call"), n, recs)
        return recs, end, self.stdout()

    def stdout(self):
        """What the jail wrote to stdout since the last look."""
        with open(self.stdout_path, "rb") as f:
            f.seek(self.stdout_seen)
            data = f.read()
        self.stdout_seen += len(data)
        return data.decode()

    def stderr(self):
        with open(self.stderr_path, "rb") as f:
            return f.read().decode()

    def wait_stdout(self, text, timeout=SESSION_DEADLINE):
        """Wait until stdout (since the last look) holds text; returns it."""
        deadline = time.monotonic() + timeout
        seen = ""
        while text not in seen:
            if time.monotonic() >= deadline:
                raise AssertionError(f"stdout: no {text!r} within {timeout}s (have {seen!r}); stderr: {self.stderr()!r}")
            time.sleep(0.01)
            seen += self.stdout()
        return seen

    def wait_exit(self, timeout=SESSION_DEADLINE):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"init did not exit within {timeout}s") from None


class SessionModeTest(RunnerTestCase):
    """init.c's session mode (fds 5 and 6) with the runner's session jobs,
    as internal/run/session.go drives them."""

    def setUp(self):
        super().setUp()
        self.prefix = pid_namespace_prefix()
        if self.prefix is None:
            self.skipTest("no new pid namespace here (unshare): session mode's kill(-1) must stay in one")

    def start(self, session=True, stdin=b""):
        jail = SessionJail(self, self.prefix, stdin=stdin)
        if session:
            jail.command("s")  # as the daemon does before anything can end the runner
        return jail

    def assertNoStatus(self, jail, wait=0.0):
        self.assertEqual(jail.status.pending(wait), [])

    def test_state_persists_between_calls(self):
        jail = self.start()
        recs, end, out = jail.call("x = 41\nprint('set')\n")
        self.assertEqual((recs, end, out), ([], {"type": "end", "status": 0, "call": 1}, "set\n"))
        recs, end, _ = jail.call("import math\n1 / 0\n")
        self.assertEqual([r["exc_type"] for r in recs], ["ZeroDivisionError"])
        self.assertEqual(end, {"type": "end", "status": 1, "call": 2})
        recs, end, out = jail.call("x + 1 if math.pi > 3 else 0\n", last_line_interactive=True)
        self.assertEqual(recs, [{"type": "result", "repr": "42", "truncated": False}])
        self.assertEqual((end, out), ({"type": "end", "status": 0, "call": 3}, "42\n"))
        self.assertNoStatus(jail)
        self.assertIn("ZeroDivisionError", jail.stderr())
        self.assertNoRunnerFrames(jail.stderr())

    def test_system_exit_ends_only_the_call(self):
        jail = self.start()
        jail.call("x = 1\n")
        recs, end, out = jail.call("import sys\nprint('before')\nsys.exit(3)\nprint('after')\n")
        self.assertEqual((recs, end["status"], out), ([], 3, "before\n"))
        recs, end, _ = jail.call("raise SystemExit('bye')\n")
        self.assertEqual((recs, end["status"]), ([], 1))
        self.assertIn("bye\n", jail.stderr())
        recs, end, _ = jail.call("sys.exit()\n")
        self.assertEqual((recs, end["status"]), ([], 0))
        recs, end, out = jail.call("print(x)\n")
        self.assertEqual((recs, end["status"], out), ([], 0, "1\n"))
        self.assertNoStatus(jail)

    def test_stdin_per_call(self):
        jail = self.start(stdin=b"from fd 0\n")
        recs, end, out = jail.call("print(input())\n", stdin="hello\n")
        self.assertEqual((recs, end["status"], out), ([], 0, "hello\n"))
        # Bytes as code points: UTF-8 "é" arrives as two characters.
        recs, end, out = jail.call("import sys\nprint(ascii(sys.stdin.read()))\n", stdin="caf\u00c3\u00a9")
        self.assertEqual((end["status"], out), (0, "'caf\\xe9'\n"))
        # Neither the earlier call's stdin nor the jail's fd 0.
        recs, end, out = jail.call("print(input())\n")
        self.assertEqual([r["exc_type"] for r in recs], ["EOFError"])
        self.assertEqual((end["status"], out), (1, ""))
        recs, end, out = jail.call("print(repr(input()))\n", stdin=None)
        self.assertEqual([r["exc_type"] for r in recs], ["EOFError"])

    def test_interrupt_ends_the_call_and_keeps_state(self):
        jail = self.start()
        jail.call("x = 41\n")
        jail.submit("y = 'kept'\nprint('looping', flush=True)\nwhile True:\n    pass\n")
        jail.wait_stdout("looping\n")
        jail.command("i")
        recs = jail.records_to_end()
        self.assertEqual(recs[-1], {"type": "end", "status": 1, "call": 2})
        (exc,) = recs[:-1]
        self.assertEqual((exc["type"], exc["exc_type"]), ("exception", "KeyboardInterrupt"))
        self.assertIn(exc["line"], (3, 4))  # in the loop
        self.assertIn("KeyboardInterrupt", jail.stderr())
        self.assertNoRunnerFrames(jail.stderr())
        recs, end, out = jail.call("(x, y)\n", last_line_interactive=True)
        self.assertEqual(recs, [{"type": "result", "repr": "(41, 'kept')", "truncated": False}])
        self.assertEqual(end["status"], 0)
        # A handler the user installed in one call is theirs in the next.
        recs, end, out = jail.call(
            "import signal\n"
            "def h(*a): print('handled', flush=True)\n"
            "signal.signal(signal.SIGINT, h)\n"
        )
        self.assertEqual(end["status"], 0)
        jail.submit("import time\nprint('waiting', flush=True)\nfor _ in range(500):\n    time.sleep(0.01)\n")
        jail.wait_stdout("waiting\n")
        jail.command("i")
        self.assertEqual(jail.wait_stdout("handled\n"), "handled\n")
        jail.command("k")
        self.assertEqual(jail.status.readline(), "exit -1 9")

    def test_sigint_between_calls_is_ignored(self):
        jail = self.start()
        recs, end, _ = jail.call("import os\nx = 1\npid = os.getpid()\n")
        self.assertEqual(end["status"], 0)
        jail.command("ii")
        time.sleep(0.2)  # init has sent them, to a runner waiting for its job
        self.assertNoStatus(jail)
        recs, end, out = jail.call("print(x + 1, os.getpid() == pid)\n")
        self.assertEqual((recs, end["status"], out), ([], 0, "2 True\n"))
        self.assertNoStatus(jail)

    def test_kill_and_restart(self):
        jail = self.start()
        recs, end, out = jail.call(
            "import subprocess\n"
            "x = 5\n"
            "with open('kept.txt', 'w') as f:\n"
            "    f.write('kept')\n"
            "p = subprocess.Popen(['sleep', '1000'])\n"
            "print(p.pid)\n"
        )
        self.assertEqual(end["status"], 0, jail.stderr())
        sleep_pid = int(out)
        jail.submit(
            "import signal\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "print('looping', flush=True)\n"
            "while True:\n"
            "    pass\n"
        )
        jail.wait_stdout("looping\n")
        # Part of a job the killed interpreter never read is not the next one's.
        os.write(jail.job_w, b'{"code": "print(\'stale\')", "session": true')
        jail.command("i")  # ignored by the code: the call goes on
        self.assertEqual(jail.records.pending(0.2), ['{"type": "start", "call": 2}'])
        self.assertNoStatus(jail)
        jail.command("k")
        self.assertEqual(jail.status.readline(), "exit -1 9")
        # init reaped every process before saying so; the killed call has
        # no end.
        self.assertEqual([r for r in jail.records.pending() if r.strip()], [])
        jail.command("r")
        self.assertEqual(jail.status.readline(), "started")
        recs, end, out = jail.call(
            "import os\n"
            "procs = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
            f"print(procs == [1, os.getpid()], os.path.exists('/proc/{sleep_pid}'), open('kept.txt').read())\n"
        )
        self.assertEqual((recs, end["status"], out), ([], 0, "True False kept\n"), jail.stderr())
        recs, end, _ = jail.call("x\n")
        self.assertEqual([(r["exc_type"], r["message"]) for r in recs], [("NameError", "name 'x' is not defined")])
        self.assertEqual(end["status"], 1)
        self.assertNoStatus(jail)

    def test_reexec_keeps_the_interpreter(self):
        """'x' executes init afresh in place (a restored session's init),
        adopting the running interpreter: state, session mode, a loss and
        a restart all as before; after a loss, 'x' then 'r' too."""
        jail = self.start()
        jail.call("x = 41\n")
        jail.command("x")
        self.assertEqual(jail.status.readline(), "started")
        recs, end, out = jail.call("print(x + 1)\n")
        self.assertEqual((recs, end, out), ([], {"type": "end", "status": 0, "call": 2}, "42\n"))
        jail.command("x")
        self.assertEqual(jail.status.readline(), "started")
        jail.submit("import os\nos._exit(3)\n")
        self.assertEqual(jail.status.readline(), "exit 3 0")
        jail.command("x")  # init waits for 'r' now, and executes afresh first
        self.assertEqual(jail.status.readline(), "started")
        jail.command("r")
        self.assertEqual(jail.status.readline(), "started")
        recs, end, out = jail.call("print('fresh', 'x' in globals())\n")
        self.assertEqual((recs, end["status"], out), ([], 0, "fresh False\n"))
        self.assertNoStatus(jail)

    def test_crash_and_restart(self):
        jail = self.start()
        jail.call("x = 1\n")
        jail.submit("import os\nos._exit(7)\n")
        self.assertEqual(jail.status.readline(), "exit 7 0")
        self.assertEqual([r for r in jail.records.pending() if r.strip()], ['{"type": "start", "call": 2}'])
        jail.command("r")
        self.assertEqual(jail.status.readline(), "started")
        recs, end, out = jail.call("print('alive', 'x' in globals())\n")
        self.assertEqual((recs, end, out), ([], {"type": "end", "status": 0, "call": 3}, "alive False\n"))
        # The fresh runner's end (EOF on its jobs) is a loss as well.
        jail.submit("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
        self.assertEqual(jail.status.readline(), "exit -1 9")
        jail.command("r")
        self.assertEqual(jail.status.readline(), "started")
        recs, end, out = jail.call("print('again')\n")
        self.assertEqual((end["status"], out), (0, "again\n"))

    def test_control_eof_ends_the_jail(self):
        jail = self.start()
        jail.call("x = 1\n")
        jail.close_control()  # the daemon is gone, the runner waits for a job
        self.assertEqual(jail.status.readline(), "exit -1 9")
        self.assertIsNone(jail.status.readline())
        self.assertEqual(jail.wait_exit(), 0)
        self.assertEqual(jail.records.read_to_eof().strip(), "")

    def test_control_eof_while_waiting_for_restart(self):
        jail = self.start()
        jail.submit("import os\nos._exit(0)\n")
        self.assertEqual(jail.status.readline(), "exit 0 0")
        jail.close_control()
        self.assertIsNone(jail.status.readline())
        self.assertEqual(jail.wait_exit(), 0)

    def test_without_session_mode_init_ends_with_the_runner(self):
        # fds 5 and 6 given, 's' never written: as before sessions.
        for code, want, exit_records in (
            ("print('hi')\nimport sys\nsys.exit(5)\n", 5, []),
            ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", 128 + signal.SIGKILL,
             [{"type": "exit", "signal": signal.SIGKILL}]),
        ):
            with self.subTest(code=code):
                jail = self.start(session=False)
                jail.write_job({"code": code, "filename": "main.py"}, last=True)
                self.assertEqual(jail.wait_exit(), want, jail.stderr())
                records = [json.loads(line) for line in jail.records.read_to_eof().splitlines() if line.strip()]
                self.assertEqual(records, exit_records)
                self.assertIsNone(jail.status.readline())
                jail.close()
        # 'i' interrupts a single run, which ends as Python would (by SIGINT).
        jail = self.start(session=False)
        jail.write_job({"code": "print('looping', flush=True)\nwhile True:\n    pass\n", "filename": "main.py"}, last=True)
        jail.wait_stdout("looping\n")
        jail.command("i")
        self.assertEqual(jail.wait_exit(), 128 + signal.SIGINT, jail.stderr())
        records = [json.loads(line) for line in jail.records.read_to_eof().splitlines() if line.strip()]
        self.assertEqual([r["type"] for r in records], ["exception", "exit"])
        self.assertIsNone(jail.status.readline())
        # Jobs with "more", then EOF on the jobs: status 0, no status line.
        jail = self.start(session=False)
        jail.write_job({"code": "x = 1", "more": True})
        self.assertEqual(jail.next_record(), {"type": "end", "status": 0})
        os.close(jail.job_w)
        jail.job_w = None
        self.assertEqual(jail.wait_exit(), 0)
        self.assertIsNone(jail.status.readline())


if __name__ == "__main__":
    unittest.main()


class TestRecordsReattach(unittest.TestCase):
    """A restored session's runner has a new records pipe on fd 4: the job
    names it by its inode, and only that pipe is taken."""

    def setUp(self):
        spec = importlib.util.spec_from_file_location("jaild_runner_under_test", RUNNER)
        self.runner = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.runner)

    def test_reattach_takes_only_the_named_pipe(self):
        a_r, a_w = os.pipe()
        b_r, b_w = os.pipe()
        fd = os.dup(a_w)
        for f in (a_r, a_w, b_r, b_w, fd):
            self.addCleanup(os.close, f)
        writer = self.runner.RecordWriter(fd)
        writer.emit({"type": "one"})
        self.assertEqual(os.read(a_r, 100), b'{"type": "one"}\n')
        os.dup2(b_w, fd)  # what a restore does: another pipe on the fd
        writer.emit({"type": "lost"})
        writer.reattach(os.fstat(a_w).st_ino)  # not the pipe on the fd now
        writer.emit({"type": "lost"})
        writer.reattach(os.fstat(b_w).st_ino)
        writer.emit({"type": "two"})
        os.set_blocking(b_r, False)
        self.assertEqual(os.read(b_r, 100), b'{"type": "two"}\n')
        with tempfile.TemporaryFile() as f:  # a file is never taken
            os.dup2(f.fileno(), fd)
            writer.emit({"type": "x"})
            writer.reattach(os.fstat(f.fileno()).st_ino)
            writer.emit({"type": "x"})
            f.seek(0)
            self.assertEqual(f.read(), b"")

    def test_job_names_the_pipe(self):
        job = self.runner.parse_job(b'{"code": "1", "session": true, "call": 2, "records": 12345}')
        self.assertEqual(job.records, 12345)
        self.assertIsNone(self.runner.parse_job(b'{"code": "1"}').records)
        with self.assertRaises(self.runner.JobError):
            self.runner.parse_job(b'{"code": "1", "records": "x"}')
