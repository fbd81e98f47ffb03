"""`sandboxio mcp` driven by real MCP clients, without a model: the official Python SDK
(`mcp`), the OpenAI Agents SDK's MCP client (`agents.mcp`) and LangChain/LangGraph's
`langchain-mcp-adapters`, each over stdio and over Streamable HTTP with the bearer token.
Each lists the tools, creates a sandbox, runs a command, runs a cell (a PNG comes back as
image content), writes, reads and lists a file, and kills the sandbox; the official client
also sees a wider policy refused, a wrong token refused and malformed JSON-RPC answered
with a 4xx and a message. Prints the protocol revision each negotiated, one line each:

    client=mcp transport=stdio protocol=2025-11-25 ok

Run by scripts/mcp-clients-check: python3 mcp_clients.py /path/to/sandboxio
"""

import asyncio
import base64
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile

import httpx

TOKEN = secrets.token_hex(16)
PNG_B64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
CELL = (
    "import base64\n"
    "class Pic:\n"
    f"    def _repr_png_(self): return base64.b64decode('{PNG_B64}')\n"
    "print(1 + 1)\n"
    "Pic()"
)
SERVER_ARGS = ["mcp", "--dsn", "local://", "--network", "deny"]
# Every server's TMPDIR, where local:// keeps its workspaces: empty again at the end.
SCRATCH = tempfile.mkdtemp(prefix="sandboxio-mcp-clients-")
# mkdtemp makes it 0700; local://'s sandbox reads its seccomp filter from under it.
os.chmod(SCRATCH, 0o755)
SERVER_ENV = {"TMPDIR": SCRATCH}


def leftovers():
    """The local:// workspaces under SCRATCH."""
    return [
        os.path.join(root.path, entry.name)
        for root in os.scandir(SCRATCH)
        if root.name.startswith("sandboxio-local-")
        for entry in os.scandir(root.path)
        if entry.is_dir()
    ]


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def describe(error):
    """An exception and, for a group, every exception in it."""
    if isinstance(error, BaseExceptionGroup):
        return repr(error) + "".join(describe(e) for e in error.exceptions)
    return repr(error)


def text_of(content):
    """The text blocks of a tool result's content, joined."""
    return "\n".join(block.text for block in content if getattr(block, "type", None) == "text")


def images_of(content):
    return [block for block in content if getattr(block, "type", None) == "image"]


async def exercise(call, names, label):
    """The common round: `call(tool, args)` returns an MCP `CallToolResult`."""
    expected = {"create_sandbox", "run_command", "run_code", "read_file", "write_file", "list_files", "kill_sandbox"}
    check(expected <= set(names), f"{label}: tools {sorted(names)}")
    created = await call("create_sandbox", {})
    check(not created.isError, f"{label}: create {created}")
    sandbox = created.structuredContent["sandbox_id"]
    ran = await call("run_command", {"sandbox_id": sandbox, "command": "echo hello; exit 3"})
    check(text_of(ran.content) == "exit code 3\n--- stdout ---\nhello\n", f"{label}: run {ran}")
    cell = await call("run_code", {"sandbox_id": sandbox, "code": CELL})
    check(not cell.isError and "--- stdout ---\n2\n" in text_of(cell.content), f"{label}: cell {cell}")
    images = images_of(cell.content)
    check(len(images) == 1 and images[0].mimeType == "image/png", f"{label}: cell image {cell}")
    check(base64.b64decode(images[0].data).startswith(b"\x89PNG"), f"{label}: PNG bytes")
    # One Python session per sandbox: a cell sees what the one before it defined.
    first = await call("run_code", {"sandbox_id": sandbox, "code": "x = 41"})
    check(not first.isError, f"{label}: state cell {first}")
    second = await call("run_code", {"sandbox_id": sandbox, "code": "print(x + 1)"})
    check(text_of(second.content) == "--- stdout ---\n42\n", f"{label}: state kept {second}")
    wrote = await call("write_file", {"sandbox_id": sandbox, "path": "notes/a.txt", "content": label})
    check(not wrote.isError, f"{label}: write {wrote}")
    read = await call("read_file", {"sandbox_id": sandbox, "path": "notes/a.txt"})
    check(text_of(read.content) == label, f"{label}: read {read}")
    listed = await call("list_files", {"sandbox_id": sandbox, "path": "notes"})
    check(text_of(listed.content).startswith("a.txt\t"), f"{label}: list {listed}")
    killed = await call("kill_sandbox", {"sandbox_id": sandbox})
    check(not killed.isError, f"{label}: kill {killed}")
    gone = await call("run_command", {"sandbox_id": sandbox, "command": "true"})
    check(gone.isError and gone.structuredContent["code"] == "SBX-007", f"{label}: killed {gone}")
    return sandbox


class HttpServer:
    """`sandboxio mcp --transport http` on a free loopback port, stopped with SIGTERM."""

    def __init__(self, binary):
        env = dict(os.environ, SANDBOXIO_MCP_TOKEN=TOKEN, **SERVER_ENV)
        self.proc = subprocess.Popen(
            [binary, *SERVER_ARGS, "--transport", "http", "--listen", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        line = self.proc.stderr.readline()
        match = re.match(r"sandboxio mcp: listening on (\S+)", line)
        check(match, f"server said: {line!r}")
        self.url = match.group(1)
        self.headers = {"Authorization": f"Bearer {TOKEN}"}

    def stop(self):
        self.proc.terminate()
        code = self.proc.wait(timeout=30)
        log = self.proc.stderr.read()
        check(code == 130, f"server exit {code}: {log}")
        return log


def report(client, transport, protocol):
    print(f"client={client} transport={transport} protocol={protocol} ok", flush=True)


async def official(binary):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    async def round_trip(session, label):
        init = await session.initialize()
        names = [t.name for t in (await session.list_tools()).tools]
        await exercise(session.call_tool, names, label)
        wider = await session.call_tool("create_sandbox", {"network": "allow"})
        check(wider.isError and wider.structuredContent["code"] == "SBX-013", f"{label}: wider {wider}")
        return init.protocolVersion

    params = StdioServerParameters(command=binary, args=SERVER_ARGS, env=SERVER_ENV)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        report("mcp", "stdio", await round_trip(session, "mcp/stdio"))

    server = HttpServer(binary)
    try:
        async with httpx.AsyncClient(headers=server.headers) as http:
            async with streamable_http_client(server.url, http_client=http) as (read, write, _):
                async with ClientSession(read, write) as session:
                    report("mcp", "http", await round_trip(session, "mcp/http"))
        # A wrong token never gets a session.
        try:
            async with httpx.AsyncClient(headers={"Authorization": "Bearer wrong-token-0123456789"}) as http:
                async with streamable_http_client(server.url, http_client=http) as (read, write, _):
                    async with ClientSession(read, write) as session:
                        await asyncio.wait_for(session.initialize(), 10)
            refused = False
        except Exception as e:  # the SDK raises an exception group from its task group
            refused = e
        check(refused and "401" in describe(refused), f"a wrong token: {refused!r}")
        # Malformed JSON-RPC is refused with a 4xx and a message (rmcp answers 415 "fail to
        # deserialize request body", not a JSON-RPC -32700), and the server goes on serving.
        async with httpx.AsyncClient(headers=server.headers) as http:
            garbage = await http.post(
                server.url,
                content=b"{not json",
                headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
            )
        check(
            400 <= garbage.status_code < 500 and "deserialize" in garbage.text,
            f"garbage: {garbage.status_code} {garbage.text}",
        )
    finally:
        log = server.stop()
    check(" POST /mcp 401" in log, f"the wrong token is audited: {log}")


async def openai_agents(binary):
    from agents.mcp import MCPServerStdio, MCPServerStreamableHttp

    async def round_trip(server, label):
        names = [t.name for t in await server.list_tools()]
        await exercise(server.call_tool, names, label)
        return server.server_initialize_result.protocolVersion

    async with MCPServerStdio(params={"command": binary, "args": SERVER_ARGS, "env": SERVER_ENV}, client_session_timeout_seconds=60) as server:
        report("openai-agents", "stdio", await round_trip(server, "openai-agents/stdio"))
    http = HttpServer(binary)
    try:
        params = {"url": http.url, "headers": http.headers, "timeout": 60}
        async with MCPServerStreamableHttp(params=params, client_session_timeout_seconds=60) as server:
            report("openai-agents", "http", await round_trip(server, "openai-agents/http"))
    finally:
        http.stop()


async def langchain(binary):
    from langchain_mcp_adapters.client import MultiServerMCPClient
    from langchain_mcp_adapters.tools import load_mcp_tools

    async def round_trip(client, label):
        # One session for the whole round: a sandbox lives as long as the stdio session.
        async with client.session("sandboxio", auto_initialize=False) as session:
            init = await session.initialize()
            tools = {tool.name: tool for tool in await load_mcp_tools(session)}
            # LangGraph calls these tools; each forwards to the session's tools/call.
            created = await tools["create_sandbox"].ainvoke({})
            check(isinstance(created, (str, list)) and created, f"{label}: LangChain tool result {created!r}")
            sandbox = created if isinstance(created, str) else created[0]["text"]
            killed = await tools["kill_sandbox"].ainvoke({"sandbox_id": sandbox})
            check("killed" in str(killed), f"{label}: LangChain kill {killed!r}")
            await exercise(session.call_tool, list(tools), label)
            return init.protocolVersion

    stdio = MultiServerMCPClient({"sandboxio": {"transport": "stdio", "command": binary, "args": SERVER_ARGS, "env": SERVER_ENV}})
    report("langchain-mcp-adapters", "stdio", await round_trip(stdio, "langchain/stdio"))
    server = HttpServer(binary)
    try:
        http = MultiServerMCPClient(
            {"sandboxio": {"transport": "streamable_http", "url": server.url, "headers": server.headers}}
        )
        report("langchain-mcp-adapters", "http", await round_trip(http, "langchain/http"))
    finally:
        server.stop()


async def main(binary):
    # A sandbox left by a client that did not kill it must go with its server; here every
    # round kills its own, so anything left is a leak.
    try:
        for client in (official, openai_agents, langchain):
            await client(binary)
            check(not leftovers(), f"{client.__name__} left sandboxes: {leftovers()}")
    finally:
        shutil.rmtree(SCRATCH, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
