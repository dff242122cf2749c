"""airlock for Python: make a function that does work exactly-once.

A tool marked ``upstream: {caller: true}`` in airlock's manifest is run by its
caller, here, and airlock decides whether it runs: it derives the key from the
tool's natural key (you never send one), so the same work asked twice — by a
retry, another thread, another process — runs once, and every repeat gets the
first result, marked ``"repeat": True``::

    import airlock

    @airlock.guarded("save_note")
    def save_note(record_id: str, text: str) -> dict:
        return notes.add(record_id, text)

    save_note(record_id="WD-1", text="checked")   # runs
    save_note(record_id="wd-1 ", text="checked")  # does not: the first answer, repeat

The decorated function returns the answer airlock's gateway gives an agent:
``{"status": "succeeded", "repeat": False, "result": ...}``. A repeat is never
an exception. Raise ``airlock.Failure`` (or an exception in ``failures=``) when
the work definitively did not happen; any other exception leaves the work in
doubt (it may have happened), and it is never run again by airlock.

Configured like the CLI: ``AIRLOCK_URL`` and ``AIRLOCK_TOKEN`` (an agent's
token), or ``Client(url=..., token=...)``. Standard library only.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, Iterator, Optional, Tuple, Type, TypeVar, Union

__all__ = [
    "AirlockError",
    "Answer",
    "Client",
    "Failure",
    "Worker",
    "guarded",
    "idempotency_key",
    "plan",
    "run",
    "wrap",
]

Answer = Dict[str, Any]
"""What airlock answers an agent: status, repeat, and result or message."""

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_URL = "http://127.0.0.1:8420"


class Failure(Exception):
    """Raise it when the work definitively did not happen (a refusal, a
    validation error of the service): the record is failed, with the message
    as its error, and a repeat gets the same failure without running."""


class AirlockError(Exception):
    """airlock refused the call: bad input, a tool that is not run by its
    caller, a run over its budget, a store it could not reach. Nothing ran.

    ``code`` is airlock's error code (``missing_field``, ``not_callable``,
    ``budget_exceeded``, ``store_unavailable``, …), ``field`` the field it is
    about, if any, ``status`` the HTTP status (0: airlock was not reached)."""

    def __init__(self, code: str, message: str, field: str = "", status: int = 0):
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.status = status

    def __str__(self) -> str:
        where = f" ({self.field})" if self.field else ""
        return f"{self.code}{where}: {self.message}"


_run: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("airlock_run", default=None)
_key: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("airlock_key", default=None)


def idempotency_key() -> Optional[str]:
    """Inside a guarded function or a worker's handler of a tool that honours
    keys (``honors_idempotency_key``): airlock's key for this work, to pass
    to the service (its ``Idempotency-Key``), so that work taken over after
    its first holder vanished runs once there. None otherwise."""
    return _key.get()


@contextlib.contextmanager
def run(run_id: str) -> Iterator[None]:
    """Calls made inside ``with airlock.run("run-42"):`` belong to that run
    (its budgets, run windows and grace count them together)."""
    token = _run.set(run_id)
    try:
        yield
    finally:
        _run.reset(token)


class Client:
    """A connection to one airlock server."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *, timeout: float = 60.0):
        self.url = (url or os.environ.get("AIRLOCK_URL") or DEFAULT_URL).rstrip("/")
        self.token = token if token is not None else os.environ.get("AIRLOCK_TOKEN", "")
        self.timeout = timeout

    # -- the claims API ---------------------------------------------------

    def claim(self, tool: str, args: Dict[str, Any], run_id: Optional[str] = None) -> Answer:
        """POST /v1/claims: ``{"status": "execute", "claim": ...}`` when this
        caller now holds the work, else the answer (nothing to run)."""
        body: Dict[str, Any] = {"tool": tool, "args": args}
        if run_id:
            body["run_id"] = run_id
        return self._post("/v1/claims", body)

    def renew(self, claim: str) -> Answer:
        """POST /v1/claims/{claim}/renew: the work is still running."""
        return self._post(f"/v1/claims/{urllib.parse.quote(claim, safe='')}/renew", None)

    def complete(self, claim: str, outcome: str, result: Any = None, error: str = "") -> Answer:
        """POST /v1/claims/{claim}/complete with outcome succeeded, failed,
        unknown or not_started; the answer the first call gets. Retried
        while airlock cannot be reached: a completion retried after a lost
        reply gets the same answer."""
        body: Dict[str, Any] = {"outcome": outcome}
        if result is not None:
            body["result"] = result
        if error:
            body["error"] = error[:4096]
        path = f"/v1/claims/{urllib.parse.quote(claim, safe='')}/complete"
        delay, deadline = 0.1, time.monotonic() + 30
        while True:
            try:
                return self._post(path, body)
            except AirlockError as e:
                if e.status not in (0, 503) or time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    # -- guarding functions -----------------------------------------------

    def guarded(self, tool: str, *, failures: Tuple[Type[BaseException], ...] = (Failure,),
                run_id: Union[str, Callable[[], Optional[str]], None] = None) -> Callable[[F], F]:
        """A decorator: the function runs only when this caller holds the
        work's claim, and returns airlock's answer. Its keyword arguments are
        the tool's arguments (positional ones are refused: the tool's schema
        names them). ``failures`` are the exceptions that mean the work
        definitively did not happen; any other leaves it in doubt."""

        def decorate(fn: F) -> F:
            if inspect.iscoroutinefunction(fn):
                @functools.wraps(fn)
                async def run_async(*a: Any, **kwargs: Any) -> Answer:
                    _no_positional(tool, a)
                    rid = _run_id(run_id)
                    answer = await asyncio.to_thread(self.claim, tool, kwargs, rid)
                    if answer.get("status") != "execute":
                        return answer
                    token = _key.set(answer.get("idempotency_key"))
                    try:
                        with _Renewal(self, answer):
                            try:
                                value = await fn(**kwargs)
                            except BaseException as e:  # noqa: BLE001 - every outcome is recorded
                                return await asyncio.to_thread(self._fail, answer["claim"], e, failures)
                        return await asyncio.to_thread(self._succeed, answer["claim"], value)
                    finally:
                        _key.reset(token)

                return run_async  # type: ignore[return-value]

            @functools.wraps(fn)
            def run_sync(*a: Any, **kwargs: Any) -> Answer:
                _no_positional(tool, a)
                answer = self.claim(tool, kwargs, _run_id(run_id))
                if answer.get("status") != "execute":
                    return answer
                return self._execute(answer, lambda: fn(**kwargs), failures)

            return run_sync  # type: ignore[return-value]

        return decorate

    def _execute(self, held: Answer, call: Callable[[], Any], failures: Tuple[Type[BaseException], ...]) -> Answer:
        """Runs the work of a held claim, renewing its lease, and completes it."""
        token = _key.set(held.get("idempotency_key"))
        try:
            # The lease is renewed until the outcome is recorded: a
            # completion refused as too large and sent again still holds it.
            with _Renewal(self, held):
                try:
                    value = call()
                except BaseException as e:  # noqa: BLE001 - every outcome is recorded
                    return self._fail(held["claim"], e, failures)
                return self._succeed(held["claim"], value)
        finally:
            _key.reset(token)

    # -- irreversible tools: plans and workers ------------------------------

    def plan(self, tool: str, run_id: Optional[str] = None, **args: Any) -> Answer:
        """Proposes irreversible work (``plan_TOOL``): the answer carries the
        plan (its id and status). Rules, or a person, approve it; a Worker
        serving the tool then runs it once. Proposing the same work again
        answers with the same plan."""
        body: Dict[str, Any] = {"tool": "plan_" + tool, "args": args}
        rid = _run_id(run_id)
        if rid:
            body["run_id"] = rid
        return self._post("/v1/calls", body)

    def next_commit(self, tools: "list[str]", wait_seconds: float = 0) -> Answer:
        """POST /v1/commits/next: execute (with the plan) or idle."""
        return self._post("/v1/commits/next", {"tools": list(tools), "wait_seconds": wait_seconds})

    def wrap(self, fn: Callable[..., Any], tool: str, **options: Any) -> Callable[..., Answer]:
        """``guarded`` for a function you do not define (an existing tool's
        callable): ``client.wrap(send_mail, "send_mail")``."""
        return self.guarded(tool, **options)(fn)

    def _succeed(self, claim: str, value: Any) -> Answer:
        try:
            json.dumps(value)
        except (TypeError, ValueError) as e:
            # It ran, but its result cannot be kept: record what is known.
            return self._finish(claim, "succeeded", {"unserializable_result": repr(value)[:1000], "reason": str(e)}, "")
        return self._finish(claim, "succeeded", value, "")

    def _fail(self, claim: str, exc: BaseException, failures: Tuple[Type[BaseException], ...]) -> Answer:
        if isinstance(exc, failures):
            answer = self._finish(claim, "failed", None, str(exc) or type(exc).__name__)
        else:
            answer = self._finish(claim, "unknown", None, f"{type(exc).__name__}: {exc}")
        if not isinstance(exc, Exception):
            raise exc  # KeyboardInterrupt, SystemExit: recorded, then on their way
        return answer

    def _finish(self, claim: str, outcome: str, result: Any, error: str) -> Answer:
        try:
            try:
                return self.complete(claim, outcome, result, error)
            except AirlockError as e:
                if e.code != "too_large" or result is None:
                    raise
                # The work ran; its result is too large to keep: keep the outcome.
                return self.complete(claim, outcome, {"result_omitted": True, "reason": e.message}, error)
        except AirlockError as e:
            if e.code != "lease_lost":
                raise
            # The lease ended before the outcome came: the record is in doubt.
            return {"status": "in_doubt", "repeat": False, "message": e.message}

    def _post(self, path: str, body: Optional[Dict[str, Any]]) -> Answer:
        data = json.dumps(body).encode() if body is not None else b""
        req = urllib.request.Request(self.url + path, data=data, method="POST")
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                err = json.loads(raw)["error"]
                raise AirlockError(err.get("code", "internal"), err.get("message", ""), err.get("field", ""), e.code) from None
            except (ValueError, KeyError, TypeError):
                raise AirlockError("internal", f"HTTP {e.code}: {raw[:200]!r}", "", e.code) from None
        except (urllib.error.URLError, OSError) as e:
            raise AirlockError("store_unavailable", f"airlock at {self.url} could not be reached: {e}; nothing was run", "", 0) from None


class Worker:
    """Runs the approved plans of irreversible tools run by their caller, in
    this process: each plan's work once, only after approval::

        worker = airlock.Worker({"pay_out": pay_out})   # handlers get the plan's arguments
        worker.run()                                     # until stop() (or a signal)

    A handler's return value is the plan's result; ``airlock.Failure`` (or
    ``failures=``) records a failure; any other exception leaves the plan in
    doubt. For a tool that honours keys, ``airlock.idempotency_key()`` inside
    the handler is the key to pass to the service: a commit whose worker was
    killed is given to the next worker with the same key."""

    def __init__(self, handlers: Dict[str, Callable[..., Any]], *, client: Optional[Client] = None,
                 failures: Tuple[Type[BaseException], ...] = (Failure,), wait_seconds: float = 20):
        if not handlers:
            raise ValueError("a Worker needs at least one handler: {tool name: function}")
        self.handlers = dict(handlers)
        self.client = client or _client()
        self.failures = failures
        self.wait_seconds = wait_seconds
        self._stop = threading.Event()

    def run_once(self, wait_seconds: Optional[float] = None) -> Optional[Answer]:
        """Runs the next approved plan's work, waiting up to wait_seconds for
        one; its answer, or None when there was none."""
        wait = self.wait_seconds if wait_seconds is None else wait_seconds
        work = self.client.next_commit(sorted(self.handlers), wait)
        if work.get("status") != "execute":
            return None
        plan = work["plan"]
        handler = self.handlers[plan["tool"]]
        return self.client._execute(work, lambda: handler(**plan["args"]), self.failures)

    def run(self) -> None:
        """Runs plans until stop(). airlock unreachable: waits and asks again.
        It asks for work a second at a time (at most wait_seconds), so that
        stop() takes effect within about a second when there is none."""
        delay = 0.5
        while not self._stop.is_set():
            try:
                self.run_once(min(self.wait_seconds, _STOP_POLL))
                delay = 0.5
            except AirlockError as e:
                if e.status not in (0, 503):
                    raise
                self._stop.wait(delay)
                delay = min(delay * 2, 10.0)

    def stop(self) -> None:
        """Ends run() after the plan in hand, if any, and within about a
        second when there is none."""
        self._stop.set()


# How long run() asks for work at a time: stop() waits at most this long
# for a poll that has nothing.
_STOP_POLL = 1.0


class _Renewal:
    """Renews a held claim about every third of its lease while the work runs."""

    def __init__(self, client: Client, held: Answer):
        self.client = client
        self.claim = held["claim"]
        self.every = max(float(held.get("lease_seconds") or 30) / 3, 0.05)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="airlock-renew", daemon=True)

    def __enter__(self) -> "_Renewal":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join()

    def _loop(self) -> None:
        while not self.stop.wait(self.every):
            try:
                self.client.renew(self.claim)
            except AirlockError as e:
                if e.code == "lease_lost":
                    return  # the completion will be told so
                # airlock unreachable for now: try again next time


def _no_positional(tool: str, args: Tuple[Any, ...]) -> None:
    if args:
        raise AirlockError("invalid_argument", f"call {tool} with keyword arguments: they are the tool's arguments by name", "args")


def _run_id(run_id: Union[str, Callable[[], Optional[str]], None]) -> Optional[str]:
    if callable(run_id):
        return run_id()
    return run_id or _run.get() or os.environ.get("AIRLOCK_RUN") or None


_default: Optional[Client] = None
_default_lock = threading.Lock()


def _client() -> Client:
    global _default
    with _default_lock:
        if _default is None:
            _default = Client()
        return _default


def guarded(tool: str, **options: Any) -> Callable[[F], F]:
    """``Client().guarded`` on a client made from AIRLOCK_URL and AIRLOCK_TOKEN
    when first used."""

    def decorate(fn: F) -> F:
        inner: Dict[str, Any] = {}

        def target() -> Callable[..., Any]:
            if "fn" not in inner:
                inner["fn"] = _client().guarded(tool, **options)(fn)
            return inner["fn"]

        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def lazy_async(*a: Any, **kwargs: Any) -> Answer:
                return await target()(*a, **kwargs)

            return lazy_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def lazy(*a: Any, **kwargs: Any) -> Answer:
            return target()(*a, **kwargs)

        return lazy  # type: ignore[return-value]

    return decorate


def wrap(fn: Callable[..., Any], tool: str, **options: Any) -> Callable[..., Answer]:
    """``guarded`` for an existing callable, on the default client."""
    return guarded(tool, **options)(fn)


def plan(tool: str, run_id: Optional[str] = None, **args: Any) -> Answer:
    """``Client().plan`` on the default client."""
    return _client().plan(tool, run_id, **args)
