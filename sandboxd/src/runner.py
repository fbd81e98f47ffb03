# The code-cell runner: one persistent Python interpreter per code context, started by the host
# through sandboxd as `python3 -I -u -c <this file>` with a control channel at descriptor 3.
#
# Cells run in one namespace, so variables survive from cell to cell. Output written to
# stdout and stderr (by print, by C code, by child processes) goes to the command's real
# stdout and stderr; results travel on the control channel, which the cell's code does not
# use. sandboxd forwards the channel only once stdout and stderr are drained, so a cell's
# printed output always arrives before its results.
#
# Isolation (`-I`): Python's start-up hooks that the sandbox can write are off, so an earlier
# cell or command cannot plant code that runs before the runner (a `usercustomize.py` or
# `.pth` file in the user's site directory, `PYTHON*` variables, modules in the working
# directory). What the interpreter's own installation holds (its standard library,
# `site-packages` and the `.pth` files there) is trusted: a sandbox user that can write it
# owns every later interpreter, and no flag of the runner's changes that.
#
# Wire format on the channel, both ways: a header line of ASCII words, the last one the
# payload's length in bytes, then the payload.
#   host -> runner:  "cell N\n" + code (UTF-8)
#   runner -> host:  "ready 0\n"                       once, when the runner is up
#                    "bundle KIND COUNT 0\n"           KIND is "result" or "display"; then
#                    "item MIME N\n" + data            COUNT times (text is UTF-8, PNG raw bytes)
#                    "error N\n" + name "\n" value "\n" traceback (UTF-8)
#                    "done COUNT 0\n"                  the cell ended; COUNT is its number
# Only the standard library's ast, io, os, signal, sys and traceback are needed (json when present).

# Not dumpable from its first instruction: the sandbox's other processes run as the same
# user (every command on `local://`), and the kernel lets such a process take a dumpable
# one's descriptors (`pidfd_getfd`, `/proc/<pid>/fd`), memory (`/proc/<pid>/mem`, ptrace) or
# environment. sandboxd starts this interpreter through an execute-only copy of its loader
# (`Spawn::undumpable`, `sandboxd/src/undumpable.rs`), which the kernel makes undumpable at
# `execve`, and checks that it did before the host hears of the runner: nothing here has to
# win a race, and no module (`ctypes`) is needed. What the cells run (`exec` makes a new
# program dumpable again) is theirs.
import sys

# The runner's own modules come from the standard library, never from the working directory
# (`-I` leaves it off the path), where an earlier cell may have planted a `traceback.py` (or
# `json.py`) to take the runner over. The cells get the path Python would give them without
# `-I`: the working directory first, then `PYTHONPATH` (they may import their own modules).
RUNNER_PATH = [p for p in sys.path if p not in ("", ".", __import__("posix").getcwd())]
sys.path[:] = RUNNER_PATH
import ast  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import traceback  # noqa: E402

try:
    import json  # noqa: E402
except ImportError:  # a minimal image without the json module
    json = None
CELL_PATH = [""] + [p for p in os.environ.get("PYTHONPATH", "").split(":") if p] + RUNNER_PATH
sys.path[:] = CELL_PATH

# The channel moves off descriptor 3 to one that is closed on exec: what a cell runs
# (`os.system`, `subprocess` with `close_fds=False`, a shell left in the background) does
# not inherit it, so no process but this interpreter writes records. The cell's own Python
# code runs in this interpreter and can still reach it; it can only forge its own results
# that way, which it could produce honestly anyway.
CTRL = os.dup(3)
os.close(3)
os.environ.setdefault("MPLBACKEND", "Agg")


def send(header, payload=b""):
    data = header.encode() + b" %d\n" % len(payload) + payload
    while data:
        n = os.write(CTRL, data)
        data = data[n:]


def read_exact(n):
    out = b""
    while len(out) < n:
        chunk = os.read(CTRL, n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return out


def read_header():
    line = b""
    while not line.endswith(b"\n"):
        ch = os.read(CTRL, 1)
        if not ch:
            raise EOFError
        line += ch
    return line.decode().split()


REPRS = [
    ("text/html", "_repr_html_"),
    ("image/png", "_repr_png_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("application/json", "_repr_json_"),
    ("text/markdown", "_repr_markdown_"),
    ("text/latex", "_repr_latex_"),
]


def as_bytes(mime, value):
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if mime == "application/json":
        if json is None:
            return repr(value).encode()
        return json.dumps(value).encode()
    return str(value).encode()


def bundle_of(obj):
    items = {}
    method = getattr(obj, "_repr_mimebundle_", None)
    if callable(method):
        try:
            got = method()
            if isinstance(got, tuple):
                got = got[0]
            for mime, value in (got or {}).items():
                items[mime] = as_bytes(mime, value)
        except Exception:
            pass
    for mime, name in REPRS:
        if mime in items:
            continue
        method = getattr(obj, name, None)
        if callable(method):
            try:
                value = method()
            except Exception:
                value = None
            if value is not None:
                items[mime] = as_bytes(mime, value)
    items.setdefault("text/plain", repr(obj).encode())
    return items


def emit(kind, items):
    sys.stdout.flush()
    sys.stderr.flush()
    send("bundle %s %d" % (kind, len(items)))
    for mime, data in items.items():
        send("item %s" % mime, data)


def display(*objs):
    for obj in objs:
        emit("display", bundle_of(obj))


def flush_figures():
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    for number in pyplot.get_fignums():
        buf = io.BytesIO()
        pyplot.figure(number).savefig(buf, format="png")
        emit("display", {"image/png": buf.getvalue(), "text/plain": b"<Figure>"})
    pyplot.close("all")


def report_error(exc):
    # Whatever traceback imports lazily comes from the standard library too.
    cell_path, sys.path[:] = sys.path[:], RUNNER_PATH
    try:
        report_error_text(exc)
    finally:
        sys.path[:] = cell_path


def report_error_text(exc):
    frames = traceback.extract_tb(exc.__traceback__)
    # Drop the runner's own frames (this file runs as `python3 -c`, so as "<string>"): the
    # traceback starts in the cell.
    frames = [f for f in frames if f.filename != "<string>"]
    text = "Traceback (most recent call last):\n" if frames else ""
    text += "".join(traceback.format_list(frames))
    text += "".join(traceback.format_exception_only(type(exc), exc))
    value = str(exc)
    payload = "%s\n%s\n%s" % (type(exc).__name__, value.replace("\n", " "), text)
    send("error", payload.encode())


def run_cell(code, namespace, count):
    try:
        tree = ast.parse(code, filename="<cell-%d>" % count, mode="exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<cell-%d>" % count, "exec"), namespace)
        if last is not None:
            value = eval(compile(last, "<cell-%d>" % count, "eval"), namespace)
            if value is not None:
                namespace["_"] = value
                emit("result", bundle_of(value))
        flush_figures()
    except BaseException as exc:  # KeyboardInterrupt from an interrupt, SystemExit, ...
        sys.stdout.flush()
        sys.stderr.flush()
        report_error(exc)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def main():
    # Cells get a fresh __main__ of their own: a cell that defines `send` or `main` must not
    # replace the runner's, which keep this file's globals.
    cells_main = type(sys)("__main__")
    cells_main.__dict__["display"] = display
    sys.modules["__main__"] = cells_main
    namespace = cells_main.__dict__
    signal.signal(signal.SIGINT, signal.default_int_handler)
    send("ready")
    count = 0
    while True:
        try:
            header = read_header()
            if len(header) != 2 or header[0] != "cell":
                sys.stderr.write("runner: unexpected request %r\n" % header)
                return 2
            code = read_exact(int(header[1])).decode()
        except EOFError:
            return 0
        except KeyboardInterrupt:
            # An interrupt between cells interrupts nothing.
            continue
        count += 1
        run_cell(code, namespace, count)
        try:
            send("done %d" % count)
        except KeyboardInterrupt:
            send("done %d" % count)


sys.exit(main())
