"""Watchdog that ends the processes of a local Ray instance once the process that started it is gone.

Ray ties its head processes (GCS server, raylet) to the driver that started them, but not the
processes the raylet starts: after a ``kill -9`` of the driver, or a Ctrl-C while Ray was
starting, ``ray::DashboardAgent``, ``ray::RuntimeEnvAgent`` and actors (``ray::SuccessiveHalving``)
kept running, and the next run did not start clean.

:func:`start` runs this file as a detached process, in a session of its own (a Ctrl-C or a kill
of the driver's process group leaves it alive). It waits until the driver's process has ended,
or until the driver asks on its standard input (a line ``reap``), then ends every Ray process
(``ray::...`` or a program of the Ray package) that holds a file open in one of the driver's Ray
session folders: ``session_<date>_<pid>``, named by Ray after the driver's process id and the
time it started, here not earlier than the watchdog. Other Ray instances on the machine (other
users, other drivers), and other programs reading the session's files, are never touched. Linux only
(it reads ``/proc``); elsewhere :func:`start` does nothing.

The file uses the standard library only: it runs by path, without importing autodeuq.
"""
from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from datetime import datetime

#: Seconds a process is given to end after SIGTERM before SIGKILL.
GRACE_S = 2.0


def start(ray_dir: str, driver_pid: int | None = None) -> int | None:
    """Start the watchdog of this process's local Ray instance.

    ``ray_dir`` is the folder of the Ray package (its programs' paths start there). Returns the
    file descriptor on which ``b"reap\\n"`` asks it to end the instance's processes
    now (None where this is not supported). The watchdog is detached (no child of this process
    to wait for, nor a pipe object left open at exit).
    """
    if not sys.platform.startswith("linux") or not os.path.isdir("/proc/self/fd"):
        return None
    driver_pid = os.getpid() if driver_pid is None else driver_pid
    read_end, write_end = os.pipe()
    try:
        starter = subprocess.Popen(
            [sys.executable, "-S", os.path.abspath(__file__), str(driver_pid), repr(time.time()), ray_dir],
            stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            cwd="/", start_new_session=True, close_fds=True,
        )
        starter.wait(timeout=30)  # it forks the watchdog and ends at once
    except (OSError, subprocess.TimeoutExpired):
        os.close(write_end)
        return None
    finally:
        os.close(read_end)
    return write_end


def session_pattern(driver_pid: int) -> re.Pattern:
    """A file inside a Ray session folder of ``driver_pid``: ``.../session_2026-11-25_14-25-28_384728_<pid>/...``."""
    return re.compile(rf"/session_(\d{{4}}-\d\d-\d\d_\d\d-\d\d-\d\d_\d+)_{driver_pid}/")


def is_ray_process(argv: list[str], ray_dir: str) -> bool:
    """Whether a command line is one of Ray's processes: a worker or agent (``ray::...``), or a
    program or script of the Ray package in ``ray_dir`` (GCS server, raylet, monitors).

    Anything else holding a file of the session (``tail -f`` of a log, a folder being removed)
    is left alone."""
    if not argv:
        return False
    if argv[0].startswith("ray::"):
        return True
    return any(arg.startswith(ray_dir.rstrip("/") + "/") for arg in argv[:3])


def session_processes(driver_pid: int, since: float, ray_dir: str) -> list[int]:
    """Ray's processes (:func:`is_ray_process`), other than the driver, holding a file open in a
    Ray session folder of ``driver_pid`` created at or after ``since`` (a :func:`time.time`)."""
    pattern, found, me = session_pattern(driver_pid), [], os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (me, driver_pid):
            continue
        try:
            targets = [os.readlink(f"/proc/{name}/fd/{fd}") for fd in os.listdir(f"/proc/{name}/fd")]
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:  # ended meanwhile, or not ours to read
            continue
        for target in targets:
            match = pattern.search(target)
            if match and _started(match.group(1)) >= since - 1.0:
                if is_ray_process(argv, ray_dir):
                    found.append(int(name))
                break
    return found


def _started(stamp: str) -> float:
    try:
        return datetime.strptime(stamp, "%Y-%m-%d_%H-%M-%S_%f").timestamp()
    except ValueError:
        return float("-inf")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"  # a zombie has ended
    except OSError:
        return False


def reap(driver_pid: int, since: float, ray_dir: str) -> list[int]:
    """End the processes of ``driver_pid``'s Ray sessions: SIGTERM, then SIGKILL after :data:`GRACE_S`."""
    pids = session_processes(driver_pid, since, ray_dir)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids + session_processes(driver_pid, since, ray_dir):  # and any started meanwhile
        if _alive(pid):
            _signal(pid, signal.SIGKILL)
    return pids


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except OSError:
        pass


def watch(driver_pid: int, since: float, ray_dir: str) -> None:
    """Wait for the driver to end (reaping on each ``reap`` line meanwhile), then reap."""
    try:
        pidfd = os.pidfd_open(driver_pid)  # readable once the process has ended; immune to pid reuse
    except (AttributeError, OSError):
        pidfd = None
    stdin, watched = 0, [0] + ([pidfd] if pidfd is not None else [])
    while _alive(driver_pid):
        ready, _, _ = select.select(watched, [], [], 0.5)
        if stdin in ready:
            data = os.read(stdin, 4096)
            if not data:  # the driver closed its end (or ended): wait for the process alone
                watched.remove(stdin)
            elif b"reap" in data:
                reap(driver_pid, since, ray_dir)
        if pidfd is not None and pidfd in ready:
            break
    reap(driver_pid, since, ray_dir)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # outlive the driver's Ctrl-C: cleaning up is the point
    if os.fork() == 0:
        watch(int(sys.argv[1]), float(sys.argv[2]), sys.argv[3])
    os._exit(0)
