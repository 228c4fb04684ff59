"""Ray itself for the Ray evaluator (:mod:`autodeuq.engine.evaluator.ray`): importing it quietly,
starting a local instance (with its reaper, :mod:`autodeuq.engine.evaluator.ray_reaper`) or joining
a cluster (:func:`init_ray`), and one clear error when a cluster cannot be reached
(:func:`connection_failure`).
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import sys
import tempfile
import threading
from typing import Any

from autodeuq.core.errors import AutoDEUQError

RAY_CONNECT_TIMEOUT = 20.0
"""Seconds allowed to reach an existing Ray cluster's address before giving up."""


class RayConnectionError(AutoDEUQError, RuntimeError):
    """Ray could not be started or joined."""


def init_ray(address: str | None = None, num_cpus: int | None = None,
             connect_timeout: float = RAY_CONNECT_TIMEOUT) -> None:
    """Start a local Ray instance, or join a cluster; once per process.

    Parameters
    ----------
    address : str, optional
        ``host:port``, ``"auto"`` or ``ray://host:port`` of a cluster to join. Without one, the
        ``RAY_ADDRESS`` environment variable is used when set; otherwise a new local instance
        is started (``"local"``), never one found in Ray's temporary folder (a stale pointer
        there to a dead head would make Ray wait for it).
    num_cpus : int, optional
        CPUs of a local instance (default: the machine's).
    connect_timeout : float
        Seconds allowed to reach the cluster's address when joining one; if something answers
        there, Ray's own connection attempt then takes about 40 s at most.

    Raises
    ------
    RayConnectionError
        One line saying what could not be started or reached, and what to do.

    Notes
    -----
    ``ray.init`` installs its own SIGTERM handlers: a Python one that exits the interpreter, and
    in its native core worker abseil's failure handler, which dumps a native stack and aborts
    (exit status 134). A SIGTERM during the seconds ``ray.init`` takes then ended the command
    with that dump, or an exit status 15 without a word. So while Ray starts, SIGTERM is only
    recorded (:func:`_sigterm_deferred`); afterwards the caller's handler is back and receives it
    (the search driver treats it like Ctrl-C: exit status 143, the run resumable).
    """
    ray = _import_ray()
    if ray.is_initialized():
        return
    source = "address"
    if address is None and os.environ.get("RAY_ADDRESS"):
        address, source = os.environ["RAY_ADDRESS"], "RAY_ADDRESS"
    kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
    with _sigterm_deferred():
        if address in (None, "local"):
            if num_cpus is not None:
                kwargs["num_cpus"] = num_cpus
            reaper = _start_reaper()
            try:
                with _without_auth_banner():
                    _init(ray, "local", kwargs, "start a local Ray instance")
            except BaseException:  # Ctrl-C or a failure half-way: end what had started
                _request_reap(reaper)
                raise
        else:
            where = f"connect to Ray at {address!r}" + (" (from RAY_ADDRESS)" if source == "RAY_ADDRESS" else "")
            host_port = _bootstrap_host_port(address, where)
            if host_port is not None:
                _probe(*host_port, connect_timeout, where, address)
            with _single_gcs_attempt(), _quiet_stderr():
                _init(ray, address, kwargs, where)


_REAPER = None  # the pipe to the watchdog of this process's local Ray instance (ray_reaper), once started


def _start_reaper():
    """Start, once per process, the watchdog that ends the local instance's processes with this one.

    Ray ties its head processes to the driver, not those the raylet starts (dashboard and
    runtime-env agents, actors): after a ``kill -9`` of the driver or a Ctrl-C while Ray starts
    they stayed (:mod:`autodeuq.engine.evaluator.ray_reaper`).
    """
    global _REAPER
    if _REAPER is None:
        import ray

        from autodeuq.engine.evaluator import ray_reaper

        _REAPER = ray_reaper.start(os.path.dirname(os.path.abspath(ray.__file__)))
    return _REAPER


def _request_reap(reaper: int | None) -> None:
    if reaper is not None:
        with contextlib.suppress(OSError):
            os.write(reaper, b"reap\n")


def _init(ray, address, kwargs, where):
    try:
        ray.init(address=address, **kwargs)
    except Exception as exc:  # turned into one actionable message
        raise RayConnectionError(connection_failure(exc, where)) from None


#: Words of Ray's errors when a cluster's token authentication refuses a connection (Ray 2.60:
#: "RPC error: InvalidAuthToken: Authentication token is missing or incorrect", a gRPC
#: "Unauthenticated" status, or an AuthenticationError when no token was found here).
_AUTH_WORDS = ("invalidauthtoken", "unauthenticated", "authenticationerror", "authentication token",
               "token authentication")
AUTH_FIX = ("run with RAY_AUTH_MODE=token and the cluster's token (the head's ~/.ray/auth_token) in RAY_AUTH_TOKEN, "
            "in ~/.ray/auth_token or in the file RAY_AUTH_TOKEN_PATH names; or start the cluster with "
            "authentication disabled (RAY_AUTH_MODE=disabled ray start --head)")


def connection_failure(exc: BaseException, where: str, environ=None) -> str:
    """One line for a failed ``ray.init``: what failed, why, and what to do.

    ``ray.init`` says only "Failed to connect to Ray cluster at ..." when the cluster refuses the
    connection; the reason is in the exceptions it chains (``__cause__``, ``__context__``). When
    that reason is the cluster's token authentication (a token missing or not the cluster's),
    the line quotes it, says what this process sent (from ``environ``, default ``os.environ``)
    and how to fix it.
    """
    environ = os.environ if environ is None else environ
    first = _first_line(exc)
    reason = None
    for link in _chain(exc):
        reason = reason or _auth_reason(link)
    if reason is None:
        return f"cannot {where}: {first}."
    mode = environ.get("RAY_AUTH_MODE")
    if mode != "token":
        sent = (f"this process has RAY_AUTH_MODE {'unset' if mode is None else repr(mode)}, so it sent no "
                f"token")
    elif "no authentication token was found" in reason.lower():
        sent = "this process has RAY_AUTH_MODE=token but found no token"
    else:
        source = ("RAY_AUTH_TOKEN" if environ.get("RAY_AUTH_TOKEN") else
                  f"the file {environ['RAY_AUTH_TOKEN_PATH']}" if environ.get("RAY_AUTH_TOKEN_PATH") else
                  "~/.ray/auth_token")
        sent = f"the token this process sent (from {source}) is not the cluster's"
    if reason in first:  # Ray's own words name the refusal: its first sentence is enough
        first, told = reason, ""
    else:
        told = f": the cluster refused it ({reason})"
    return (f"cannot {where}: {first}{told}; the cluster uses token authentication (the default of "
            f"`ray start --head`) and {sent}: {AUTH_FIX}.")


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or during, each once."""
    out = []
    while exc is not None and all(exc is not e for e in out):
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].rstrip(".") if text else type(exc).__name__


def _auth_reason(exc: BaseException) -> str | None:
    """The words of ``exc`` that say a token authentication refused the connection, else None:
    its line naming the refusal (a chained traceback's last such line), to its first sentence."""
    lines = [type(exc).__name__ + ": " + line for line in str(exc).strip().splitlines()]
    refusals = [line for line in lines if any(w in line.lower() for w in _AUTH_WORDS)]
    if not refusals:
        return None
    line = refusals[-1]
    # "ray.exceptions.AuthenticationError: RPC error: ...": the text after the exception's name.
    line = re.sub(r"^\w+: (?:[\w.]*(?:Error|Exception): )?", "", line)
    return line.split(". ")[0].strip().rstrip(".")


def _bootstrap_host_port(address: str, where: str) -> tuple[str, int] | None:
    """The host and port Ray will dial for ``address`` (None when that cannot be told)."""
    from urllib.parse import urlsplit

    if "://" in address:
        parts = urlsplit(address)
        return (parts.hostname, parts.port or 10001) if parts.hostname else None
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:  # Ray moved it: no probe, ray.init still makes one bounded attempt
        return None
    try:
        resolved = canonicalize_bootstrap_address(address)
    except Exception as exc:  # e.g. "auto" and no cluster found
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RayConnectionError(f"cannot {where}: {first}") from None
    if not resolved or ":" not in resolved:
        return None
    host, _, port = resolved.rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        return None


def _probe(host: str, port: int, timeout: float, where: str, address: str) -> None:
    """Refuse at once an ``address`` (that Ray dials as ``host:port``) where nothing listens."""
    # Ray itself retries an unreachable head for minutes; a plain TCP connection says at once
    # (or within `timeout`) whether anything listens there.
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        why = (f"no answer within {timeout:g} s" if isinstance(exc, TimeoutError)
               else (exc.strerror or type(exc).__name__).lower())
        # Ray dials a loopback address as this machine's own address: name that only as an aside.
        dialled = "" if address.rsplit("://", 1)[-1] == f"{host}:{port}" else f" (which Ray dials as {host}:{port})"
        raise RayConnectionError(
            f"cannot {where}: nothing answers at {address}{dialled}: {why}; "
            f"is the cluster's head running (`ray start --head`) and is the address right?"
        ) from None


@contextlib.contextmanager
def _single_gcs_attempt():
    """Let ``ray.init`` try the cluster once (about 40 s at most) instead of ~20 times.

    The probe has already found something listening; if that is no Ray head, retrying for
    minutes only hides the error. A user's own ``RAY_gcs_server_port_wait_time_s`` wins.
    """
    key = "RAY_gcs_server_port_wait_time_s"
    saved = os.environ.get(key)
    os.environ.setdefault(key, "1")
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = saved


@contextlib.contextmanager
def _without_auth_banner():
    """Start a local instance without Ray's banner saying that it enabled token authentication.

    Ray 2.60 prints it (a logging warning) on every local start whose ``RAY_AUTH_MODE`` is unset;
    the instance is autodeuq's own and the behaviour is unchanged (authentication stays on), so
    the line only adds noise. Other warnings of that logger still show.
    """
    import logging

    class DropBanner(logging.Filter):
        def filter(self, record):
            return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")

    logger = logging.getLogger("ray._private.authentication.authentication_token_setup")
    banner = DropBanner()
    logger.addFilter(banner)
    try:
        yield
    finally:
        logger.removeFilter(banner)


@contextlib.contextmanager
def _quiet_stderr():
    """Hold back what Ray's native code writes to stderr while joining; replay it unless joining fails.

    A failed join then reads as the one line of :class:`RayConnectionError`, not as pages of
    retry warnings.
    """
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        failed = False
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if not failed:
                held.seek(0)
                with contextlib.suppress(OSError):
                    os.write(2, held.read())


FAILURE_HANDLER_VARIABLE = "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"


def _import_ray():
    """``import ray``, the first time with abseil's native failure-signal handler off in this process.

    Ray reads ``RAY_DISABLE_FAILURE_SIGNAL_HANDLER`` when it is imported; set, the driver's core
    worker does not install the handler that turns a SIGTERM into a native stack dump and an
    abort. The variable is set only for the import (unless the environment sets it), so the
    processes of a local instance, started later, keep their handler for real crashes. When
    something imported Ray before, it is left as it is.
    """
    if "ray" in sys.modules:
        import ray

        return ray
    given = os.environ.get(FAILURE_HANDLER_VARIABLE)
    os.environ.setdefault(FAILURE_HANDLER_VARIABLE, "1")
    try:
        import ray
    finally:
        if given is None:
            os.environ.pop(FAILURE_HANDLER_VARIABLE, None)
    return ray


@contextlib.contextmanager
def _sigterm_deferred():
    """Within this block (Ray starting), a SIGTERM is recorded, then delivered to the caller's handler.

    Ray's Python handler (``sys.exit`` in the middle of ``ray.init``, which can also crash the
    half-started native core worker: exit status 139) is kept out by skipping Ray's
    ``set_sigterm_handler``; abseil's native one by :func:`_import_ray`. Outside the main
    thread, where Python delivers no signal, this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    import ray._private.utils as ray_utils

    received = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    set_handler = ray_utils.set_sigterm_handler
    ray_utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        ray_utils.set_sigterm_handler = set_handler
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
        if received and previous is not signal.SIG_IGN:
            if callable(previous):
                previous(signal.SIGTERM, None)  # the search driver's raises: it stops like Ctrl-C
            else:
                os.kill(os.getpid(), signal.SIGTERM)  # the default action: terminated, status 143
