"""Drives the Modal stub with Modal's official Python client (`modal`), the way sandboxio's
adapter uses the service: look up or create an app, get an image from a registry reference,
create a sandbox with a TTL, an idle timeout, tags and no network, exec commands (stdout,
stderr, stdin with end-of-file, the exit code), write and read a file through commands, list
sandboxes by tag, and terminate (twice). Run by tests/modal_official_client.rs, which starts
the stub, the CONNECT proxy that stands in for name resolution, and gives:

- MODAL_SERVER_URL, MODAL_TOKEN_ID, MODAL_TOKEN_SECRET: the client's own settings;
- MODAL_SANDBOX_V2=0: the client's own switch to V1 sandboxes (the `Sandbox*` RPCs and the
  command router, which the adapter speaks; 1.6 defaults to V2);
- HTTPS_PROXY: the client's own proxy support (`modal[api-proxy-support]`);
- SSL_CERT_FILE: the stub's CA, which the router channel trusts as the system store;
- SANDBOXIO_MODAL_CA: the same CA for the control-plane channel, which trusts certifi's
  bundle only (grpclib's default context), so `certifi.where` is pointed at it below.

Prints one line per step and "official-client check: passed" at the end; any failure is an
exception and a non-zero exit.
"""

import os
import sys
import time

import certifi

# The control plane's TLS trust: grpclib builds its context from certifi.where() alone.
certifi.where = lambda: os.environ["SANDBOXIO_MODAL_CA"]

import modal  # noqa: E402  (after the trust store is chosen)
from modal.stream_type import StreamType  # noqa: E402

IMAGE = "sandboxio/busybox:1"


def step(what):
    print(f"[modal {modal.__version__}] {what}", flush=True)


def main():
    started = time.monotonic()
    step("App.lookup(create_if_missing=True)")
    app = modal.App.lookup("sandboxio-official-client", create_if_missing=True)
    assert app.app_id, "no app id"

    step(f"Image.from_registry({IMAGE!r})")
    image = modal.Image.from_registry(IMAGE)

    tags = {"sandboxio.check": "official-client", "run": str(os.getpid())}
    step("Sandbox.create(timeout, idle_timeout, block_network, tags)")
    sb = modal.Sandbox.create(
        "sleep",
        "infinity",
        app=app,
        image=image,
        timeout=300,
        idle_timeout=120,
        block_network=True,
        tags=tags,
    )
    assert sb.object_id.startswith("sb-"), sb.object_id

    step("exec: stdout, stderr and the exit code")
    p = sb.exec("sh", "-c", "echo out; echo err >&2; exit 3")
    assert p.stdout.read() == "out\n", "stdout"
    assert p.stderr.read() == "err\n", "stderr"
    assert p.wait() == 3, "exit code"
    assert p.returncode == 3

    step("exec: stdin with end-of-file")
    p = sb.exec("cat")
    p.stdin.write(b"piped ")
    p.stdin.write(b"bytes")
    p.stdin.write_eof()
    p.stdin.drain()
    assert p.stdout.read() == "piped bytes", "stdin echoed"
    assert p.wait() == 0

    step("exec: a file written and read back through commands, in a workdir")
    p = sb.exec("sh", "-c", "mkdir -p /workspace/check && cat > /workspace/check/f.txt")
    p.stdin.write(b"file contents\n")
    p.stdin.write_eof()
    p.stdin.drain()
    assert p.wait() == 0
    p = sb.exec("cat", "f.txt", workdir="/workspace/check")
    got = (p.stdout.read(), p.stderr.read(), p.wait())
    assert got == ("file contents\n", "", 0), f"file read back: {got}"

    step("exec: output read in bytes, stderr to devnull, a signal")
    p = sb.exec("sh", "-c", "printf '\\000\\377'; echo gone >&2", text=False, stderr=StreamType.DEVNULL)
    assert p.stdout.read() == b"\x00\xff", "binary stdout"
    assert p.wait() == 0
    p = sb.exec("sh", "-c", "kill -9 $$")
    code = p.wait()
    # The router reports a signal apart from a code; the client shows it as 128 + n.
    assert code == 137, f"SIGKILL is 128 + 9, got {code}"

    step("Sandbox.list(app_id, tags)")
    listed = [s.object_id for s in modal.Sandbox.list(app_id=app.app_id, tags=tags)]
    assert listed == [sb.object_id], f"listed {listed}"
    other = [s.object_id for s in modal.Sandbox.list(app_id=app.app_id, tags={"run": "not-this-one"})]
    assert other == [], f"a tag nobody has listed {other}"

    step("Sandbox.from_id and poll while it runs")
    again = modal.Sandbox.from_id(sb.object_id)
    assert again.poll() is None, "a running sandbox has no return code"

    step("terminate, twice (idempotent), then wait")
    sb.terminate()
    sb.terminate()
    sb.wait(raise_on_termination=False)
    assert sb.returncode is not None, "a terminated sandbox has a return code"
    listed = [s.object_id for s in modal.Sandbox.list(app_id=app.app_id, tags=tags)]
    assert listed == [], f"a terminated sandbox is still listed: {listed}"

    step(f"official-client check: passed in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
