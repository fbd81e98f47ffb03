"""Drives the E2B protocol stub with E2B's official Python packages (`e2b`,
`e2b-code-interpreter`), so that the stub and sandboxio's adapter cannot share one
misreading of the protocol. Run by `tests/e2b_official_client.rs`, which starts the stub and
sets the environment: E2B_API_KEY, E2B_DOMAIN (the stub's domain), SSL_CERT_FILE (the
stub's CA, which the SDK's transport trusts as the system bundle) and
SANDBOXIO_E2B_PROXY (a loopback CONNECT proxy to the stub, given through the SDK's own
`proxy` option). Prints one line per step; any failure raises.
"""

import base64
import os
import sys
import time

from e2b import CommandExitException, NotFoundException, SandboxQuery
from e2b_code_interpreter import Sandbox

PROXY = os.environ["SANDBOXIO_E2B_PROXY"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def step(name):
    print(f"ok: {name}", flush=True)


def main():
    started = time.monotonic()
    sbx = Sandbox.create(timeout=120, metadata={"check": "official-client"}, proxy=PROXY)
    step(f"create {sbx.sandbox_id} (envd {sbx._envd_version})")

    assert sbx.is_running(), "a new sandbox is not running"
    step("is_running")

    listed = Sandbox.list(query=SandboxQuery(metadata={"check": "official-client"}), proxy=PROXY).next_items()
    assert [s.sandbox_id for s in listed] == [sbx.sandbox_id], listed
    step("list by metadata")

    sbx.set_timeout(90)
    step("set_timeout")

    out = sbx.commands.run("echo hello; echo oops >&2")
    assert (out.stdout, out.stderr, out.exit_code) == ("hello\n", "oops\n", 0), out
    step("commands.run: stdout, stderr, exit 0")

    try:
        sbx.commands.run("exit 3")
        raise AssertionError("a non-zero exit did not raise CommandExitException")
    except CommandExitException as e:
        assert e.exit_code == 3, e
    step("commands.run: exit 3")

    out = sbx.commands.run("pwd", cwd="/workspace")
    assert out.stdout == "/workspace\n", out
    out = sbx.commands.run('printf %s "$GREETING"', envs={"GREETING": "hi"})
    assert out.stdout == "hi", out
    step("commands.run: cwd and envs")

    handle = sbx.commands.run("sleep 30", background=True)
    assert handle.pid > 0, handle
    assert handle.pid in [p.pid for p in sbx.commands.list()], "the background process is not listed"
    assert sbx.commands.kill(handle.pid), "kill found no process"
    try:
        handle.wait()
        raise AssertionError("a killed command did not raise CommandExitException")
    except CommandExitException as e:
        assert e.exit_code == -1, e
    step("commands: background, list, kill")

    handle = sbx.commands.run("read line; echo got $line", background=True, stdin=True)
    sbx.commands.send_stdin(handle.pid, "ping\n")
    result = handle.wait()
    assert result.stdout == "got ping\n", result
    step("commands: send_stdin")

    execution = sbx.run_code("x = 6 * 7\nprint(x)\nx")
    assert execution.error is None, execution.error
    # A print may come as more than one message (the text, then the newline).
    assert "".join(execution.logs.stdout) == "42\n", execution.logs
    assert [r.text for r in execution.results] == ["42"], execution.results
    step("run_code: stdout and the main result")

    figure = (
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [4, 1, 9])\nplt.show()"
    )
    execution = sbx.run_code(figure)
    assert execution.error is None, execution.error
    pngs = [r.png for r in execution.results if r.png]
    assert len(pngs) == 1, execution.results
    assert base64.b64decode(pngs[0]).startswith(PNG_MAGIC), pngs[0][:40]
    step("run_code: a figure comes back as a PNG")

    execution = sbx.run_code("1 / 0")
    assert execution.error is not None and execution.error.name == "ZeroDivisionError", execution.error
    step("run_code: an exception is an ExecutionError")

    context = sbx.create_code_context()
    sbx.run_code("y = 5", context=context)
    execution = sbx.run_code("print(y + 1)", context=context)
    assert "".join(execution.logs.stdout) == "6\n", execution.logs
    step("run_code: state kept in a context")

    payload = bytes(range(256)) * 64
    sbx.files.write("/workspace/data.bin", payload)
    assert sbx.files.read("/workspace/data.bin", format="bytes") == payload
    step("files: multipart upload, bytes download")

    sbx.files.write("/workspace/notes.txt", "héllo\n")
    assert sbx.files.read("/workspace/notes.txt") == "héllo\n"
    step("files: text")

    info = sbx.files.write_files([
        {"path": "/workspace/a.txt", "data": "a"},
        {"path": "/workspace/b.txt", "data": "bb"},
    ])
    assert sorted(i.path for i in info) == ["/workspace/a.txt", "/workspace/b.txt"], info
    assert sbx.files.read("/workspace/b.txt") == "bb"
    step("files: several in one multipart upload")

    assert sbx.files.exists("/workspace/a.txt") and not sbx.files.exists("/workspace/nope")
    sbx.files.make_dir("/workspace/sub")
    # Hidden entries are the Python kernel's caches (matplotlib's, under $HOME).
    names = sorted(e.name for e in sbx.files.list("/workspace") if not e.name.startswith("."))
    assert names == ["a.txt", "b.txt", "data.bin", "notes.txt", "sub"], names
    sbx.files.remove("/workspace/a.txt")
    assert not sbx.files.exists("/workspace/a.txt")
    step("files: exists, make_dir, list, remove")

    try:
        sbx.files.read("/workspace/nope")
        raise AssertionError("reading a missing file did not raise")
    except NotFoundException:
        pass
    step("files: a missing file is NotFoundException")

    sbx.kill()
    assert not sbx.is_running(), "a killed sandbox still runs"
    step("kill")

    print(f"official-client check: passed in {time.monotonic() - started:.1f} s", flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception:
        import traceback

        traceback.print_exc()
        sys.exit(1)
