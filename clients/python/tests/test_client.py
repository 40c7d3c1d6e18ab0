"""The Python client against a real daemon: $JAILD_SOCKET names it
(tests/clients_test.go starts one and runs this with the package
installed by pip into a virtual environment). Nothing is skipped: without
a daemon every test fails."""

import dataclasses
import os
import unittest

import jaild
from jaild._types import WIRE_TYPES


def client():
    return jaild.Client(socket=os.environ["JAILD_SOCKET"])


class TestExecute(unittest.TestCase):
    def test_print(self):
        r = client().execute("print(1)")
        self.assertIsInstance(r, jaild.ExecuteResult)
        self.assertEqual((r.status, r.exit_code, r.stdout, r.ok), ("ok", 0, "1\n", True))
        self.assertIsInstance(r.usage, jaild.Usage)
        self.assertGreater(r.usage.duration_ms, 0)

    def test_failure_is_a_result(self):
        r = client().execute("x = 1\n1 / 0\n", limits={"timeout_ms": 10000})
        self.assertEqual((r.status, r.exit_code), ("error", 1))
        self.assertIsInstance(r.error, jaild.ExecError)
        self.assertEqual((r.error.type, r.error.line), ("ZeroDivisionError", 2))
        self.assertIn("ZeroDivisionError", r.message)

    def test_refusal_is_an_error_naming_the_field(self):
        with self.assertRaises(jaild.Error) as cm:
            client().execute("print(1)", limits={"timeout_ms": -5})
        e = cm.exception
        self.assertEqual((e.status, e.type, e.field), (400, "invalid_argument", "limits.timeout_ms"))
        self.assertIn("timeout_ms", e.message)

    def test_files_in_and_out(self):
        r = client().execute("open('out.txt', 'w').write(open('in.txt').read().upper())",
                             files=[{"path": "in.txt", "content": b"hello"}], return_files=["out.txt"])
        (f,) = r.files
        self.assertIsInstance(f, jaild.FileOut)
        self.assertEqual((f.path, f.content), ("out.txt", b"HELLO"))

    def test_result_and_rich_outputs(self):
        r = client().execute("class H:\n    def _repr_html_(self): return '<b>h</b>'\ndisplay(H())\n6 * 7\n",
                             last_line_interactive=True)
        self.assertEqual(r.result, "42")
        self.assertEqual([o.output_type for o in r.outputs], ["display_data", "execute_result"])
        self.assertIsInstance(r.outputs[0], jaild.Output)
        self.assertEqual(r.outputs[0].data["text/html"], "<b>h</b>")
        self.assertEqual(r.outputs[1].data["text/plain"], "42")

    def test_stream(self):
        events = list(client().execute_stream("import time\nprint(1)\ntime.sleep(0.3)\nprint(2)\n"))
        names = [e.event for e in events]
        self.assertEqual(names[0], "start")
        self.assertEqual(names[-1], "done")
        self.assertEqual([e.id for e in events], list(range(1, len(events) + 1)))
        stdout = "".join(e.data["text"] for e in events if e.event == "stdout")
        self.assertEqual(stdout, "1\n2\n")
        self.assertEqual(events[-1].data["status"], "ok")


class TestSessions(unittest.TestCase):
    def test_state_kept_and_deleted_at_exit(self):
        c = client()
        with c.session() as s:
            self.assertTrue(s.id)
            s.execute("x = 41")
            r = s.execute("x + 1", last_line_interactive=True)
            self.assertIsInstance(r, jaild.SessionExecuteResult)
            self.assertEqual((r.result, r.execution_count, r.session.state), ("42", 2, "idle"))
            self.assertEqual(r.outputs[0].execution_count, 2)
            cmd = s.run_command("echo hi")
            self.assertEqual((cmd["exit_code"], cmd["stdout"]), (0, "hi\n"))
            self.assertEqual(s.refresh().execution_count, 2)
            sid = s.id
        self.assertEqual(c.get_session(sid).state, "ended")
        with self.assertRaises(jaild.Error) as cm:
            c.get_session("no-such-session")
        self.assertEqual((cm.exception.status, cm.exception.type), (404, "not_found"))

    def test_streamed_call(self):
        with client().session() as s:
            events = list(s.execute_stream("print('in a session')"))
            self.assertEqual(events[-1].event, "done")
            self.assertEqual(events[-1].data["execution_count"], 1)


class TestFileStore(unittest.TestCase):
    def test_upload_use_download_delete(self):
        c = client()
        f = c.upload(b"a,b\n1,2\n", name="data.csv")
        self.assertIsInstance(f, jaild.StoredFile)
        self.assertEqual((f.name, f.size_bytes), ("data.csv", 8))
        self.assertIn(f.file_id, [x.file_id for x in c.files()])
        r = c.execute("print(open('data.csv').read(), end='')", files=[{"path": "data.csv", "file_id": f.file_id}])
        self.assertEqual(r.stdout, "a,b\n1,2\n")
        self.assertEqual(c.download(f.file_id), b"a,b\n1,2\n")
        c.delete_file(f.file_id)
        with self.assertRaises(jaild.Error) as cm:
            c.download(f.file_id)
        self.assertEqual(cm.exception.status, 404)


class TestDaemon(unittest.TestCase):
    def test_info_and_images(self):
        c = client()
        self.assertEqual(c.health().get("status"), "ok")
        self.assertTrue(c.images())

    def test_types_match_the_openapi_document(self):
        """Every property of each wire type's schema is a field of its
        class: a field the daemon adds fails here until the client has it."""
        schemas = client().openapi()["components"]["schemas"]

        def properties(name):
            s = schemas[name]
            props = set(s.get("properties", {}))
            for part in s.get("allOf", []):
                if "$ref" in part:
                    props |= properties(part["$ref"].rsplit("/", 1)[1])
                props |= set(part.get("properties", {}))
            return props

        for cls in WIRE_TYPES:
            fields = {f.name for f in dataclasses.fields(cls)}
            missing = properties(cls.SCHEMA) - fields
            self.assertFalse(missing, f"{cls.__name__} lacks {sorted(missing)} of schema {cls.SCHEMA}")

    def test_unreachable(self):
        with self.assertRaises(jaild.Error) as cm:
            jaild.Client(socket="/nonexistent/jaild.sock").health()
        self.assertEqual((cm.exception.type, cm.exception.status), ("unavailable", 0))


if __name__ == "__main__":
    unittest.main()
