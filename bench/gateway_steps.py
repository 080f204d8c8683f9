"""Where one continuing step's time goes in `ctxbudget serve`, in process (issue 27's latency).

A conversation from bench/gateway.py (its trace template, `chat_body`, its raw-asyncio loopback
upstream in a child process) grows by one agent step per request. Each request is sent twice,
to the gateway's guarded route and to the bare pass-through (`Gateway.forward` alone, what
bench/gateway.py calls ``bare``), by calling the ASGI apps directly: no client, no uvicorn (both
routes would pay those alike). Wall-clock spans (``perf_counter``) wrap the gateway's steps:

- ``total``: the ASGI call, from the first body chunk to the reply's last byte; what is
  left of it outside `Gateway.guarded` is Starlette's routing and the response's sending;
- inside `Gateway.guarded`, disjoint parts: body read, JSON parse, depth check (with the
  items' canonical keys), translate (the API's ``parse``), identity/chain, session lookup,
  the blocking work before the send (the store's refresh, `BudgetSession.prepare`, the count
  of what is sent: its worker-thread hops included, and their cost, a hop's wait less its
  function's run), upstream headers, the send (forward-body build, upstream send and read),
  the truncation check, ``sent``, record usage, the awaited part of the work after the
  reply, metrics and log line; ``rest of guarded`` is what they do not cover;
- beside them: every ``RequestCounter.count`` call's run, the work after the reply (off the
  reply's path: the fsync and the state save), and the bare route's total on the same body.

The first request of each conversation (the whole history counted) is not in the tables: they
are the medians over the steps after it. ``--tree NAME=PATH`` (repeatable) measures other
checkouts side by side with this one: one worker process per tree, on the same upstream,
their requests alternated step by step. ``--profile SIZE`` prints a cProfile of the guarded
route's steps at that size instead (worker threads run inline there, so the profile sees
them). Writes nothing.

Run: PYTHONPATH=$PWD/src .venv/bin/python bench/gateway_steps.py [--sizes 2000,35000,130000]
     [--conversations 3] [--steps 10] [--tree before=/tmp/gwtrim-before]
     [--profile 130000 [--profile-filter 'gateway/|budget_session']]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib.util
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CHUNK = 65_536
"""Body bytes per ASGI ``http.request`` message (a socket read's worth, as uvicorn hands them)."""

BEFORE_SEND = ("_refresh", "refresh", "prepare", "count", "ready")
"""The worker-thread hops between finding the conversation and sending upstream: the store's
refresh, the session's decision, the count of what is sent (one hop, ``ready``, after this
work; three before)."""


def _load_bench() -> Any:
    """bench/gateway.py as a module (its template, bodies and upstream)."""
    spec = importlib.util.spec_from_file_location("bench_gateway", HERE / "gateway.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_gateway"] = module
    spec.loader.exec_module(module)
    return module


class Spans:
    """Seconds per span name for the request in flight (thread-safe: spans end in threads)."""

    def __init__(self) -> None:
        self.now: dict[str, float] = {}
        self._lock = threading.Lock()

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            self.now[name] = self.now.get(name, 0.0) + seconds

    def take(self) -> dict[str, float]:
        with self._lock:
            out, self.now = self.now, {}
        return out


def _wrap(spans: Spans, owner: Any, attr: str, name: str) -> None:
    """Time every call of ``owner.attr`` as span ``name`` (a missing attribute is skipped: an
    older tree may not have it)."""
    fn = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
    if fn is None:
        return
    if inspect.iscoroutinefunction(fn):

        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                spans.add(name, time.perf_counter() - start)

        setattr(owner, attr, functools.wraps(fn)(timed_async))
        return

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spans.add(name, time.perf_counter() - start)

    setattr(owner, attr, functools.wraps(fn)(timed))


def _hop_name(func: Callable[..., Any]) -> str:
    name = getattr(func, "__qualname__", repr(func))
    return name.rsplit(".", 1)[-1] if "<lambda>" not in name else name


def _hop_spans(spans: Spans, name: str, waited: float, ran: float) -> None:
    """One ``to_thread`` hop on the reply's path: its wait, and its wait less its function's
    own run (what the hop itself costs)."""
    spans.add(f"hop wait: {name}", waited)
    spans.add(f"hop less run: {name}", waited - ran)
    spans.add("hops on the path", 1.0)


def _instrument(spans: Spans) -> None:
    """Wrap the gateway's steps (before any app is built: instances take the wrapped
    methods) and ``asyncio.to_thread``."""
    from ctxbudget.agent.budget_session import BudgetSession
    from ctxbudget.counting import counter
    from ctxbudget.gateway import app, chat, conversations, depth, upstream

    _wrap(spans, app.Gateway, "guarded", "guarded")
    _wrap(spans, app.Gateway, "read_body", "body read")
    _wrap(spans, app.Gateway, "read_json", "parse + depth")
    _wrap(spans, depth.DepthMemo, "body_depth", "depth check")
    _wrap(spans, chat.ChatCompletions, "parse", "translate")
    _wrap(spans, conversations.ChainMemo, "chain", "identity/chain")
    _wrap(spans, conversations.Conversations, "find", "session lookup")
    _wrap(spans, conversations.Conversations, "sent", "sent")
    _wrap(spans, conversations.Conversations, "after_reply", "after reply (awaited)")
    _wrap(spans, conversations.Conversations, "save", "after-reply work (off path)")
    _wrap(spans, upstream.Upstream, "headers", "upstream headers")
    _wrap(spans, upstream.Upstream, "open", "upstream send")
    _wrap(spans, upstream.StreamReply, "read", "upstream read")
    _wrap(spans, app.Gateway, "_send", "send")
    _wrap(spans, chat.ChatCompletions, "forward_body", "forward-body build")
    _wrap(spans, BudgetSession, "record", "record usage")
    _wrap(spans, app._Tracked, "done", "metrics + log")
    _wrap(spans, counter.RequestCounter, "count", "counter.count, all calls (run)")
    _wrap(spans, BudgetSession, "prepare", "prepare (run)")
    _wrap(spans, conversations.Conversations, "_refresh", "refresh (run)")
    _wrap(spans, conversations.Conversations, "refresh", "refresh (run)")

    plain = asyncio.to_thread

    async def to_thread(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        name = _hop_name(func)
        ran = [0.0]

        def run() -> Any:
            start = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                ran[0] = time.perf_counter() - start

        start = time.perf_counter()
        try:
            return await plain(run)
        finally:
            # The save after a reply is off its path (a task, after a conversation's first).
            if "after_reply" not in name:
                _hop_spans(spans, name, time.perf_counter() - start, ran[0])

    asyncio.to_thread = to_thread  # type: ignore[assignment]


def _scope(path: str, size: int) -> dict[str, Any]:
    headers = [
        (b"host", b"gateway.test"),
        (b"content-type", b"application/json"),
        (b"content-length", str(size).encode()),
        (b"user-agent", b"bench"),
        (b"accept", b"*/*"),
    ]
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


async def call(app: Any, path: str, body: bytes) -> tuple[int, bytes, float]:
    """POST ``body`` to ``app`` over ASGI; (status, reply body, seconds)."""
    chunks = [body[i : i + CHUNK] for i in range(0, len(body), CHUNK)] or [b""]
    done = asyncio.Event()
    sent: list[bytes] = []
    status = [0]

    async def receive() -> dict[str, Any]:
        if chunks:
            chunk = chunks.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status[0] = message["status"]
        elif message["type"] == "http.response.body":
            sent.append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set()

    start = time.perf_counter()
    await app(_scope(path, len(body)), receive, send)
    seconds = time.perf_counter() - start
    done.set()
    return status[0], b"".join(sent), seconds


async def worker(upstream_url: str, max_size: int, profile_size: int | None) -> None:
    """One tree's gateway and bare route in this process, driven by JSON lines on stdin."""
    bench = _load_bench()
    template = bench.build_template(max_size + 8_000)
    spans = Spans()
    if profile_size is None:
        _instrument(spans)
    from starlette.applications import Starlette
    from starlette.routing import Route

    from ctxbudget.agent.budget_session import MemorySessionStore
    from ctxbudget.gateway import app as app_module
    from ctxbudget.gateway.config import GatewayConfig

    where = Path(tempfile.mkdtemp(prefix="ctxbudget-gwsteps-"))
    config = GatewayConfig(
        upstream=upstream_url,
        window=1_000_000,
        tokenizer=bench.TOKENIZER,
        state=where / "gateway.sqlite3",
    )
    guarded = app_module.create_app(config)
    bare_gateway = app_module.Gateway(
        GatewayConfig(upstream=upstream_url, window=1_000_000), store=MemorySessionStore()
    )
    bare = Starlette(routes=[Route("/{path:path}", bare_gateway.forward, methods=["POST"])])
    freeze = getattr(app_module, "freeze_startup_objects", None)
    if freeze is not None:
        freeze()
    path = "/v1/chat/completions"
    tags: dict[tuple[int, int], str] = {}
    profiler = None
    if profile_size is not None:
        import cProfile

        profiler = cProfile.Profile()

        async def inline(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
            return func(*args, **kwargs)

    print(json.dumps({"ready": True}), flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        cmd = json.loads(line)
        size, conv, step = cmd["size"], cmd["conversation"], cmd["step"]
        tag = tags.setdefault((size, conv), bench.new_tag())
        n = template.ends[template.start(size) + step]
        body = bench.chat_body(template.messages(tag, n), stream=False)
        out: dict[str, Any] = {"tokens": template.tokens[n], "bytes": len(body)}
        for target in cmd["targets"]:
            app = guarded if target == "ctxbudget" else bare
            spans.take()
            if profiler is not None and target == "ctxbudget" and step > 0:
                plain, asyncio.to_thread = asyncio.to_thread, inline  # type: ignore[assignment]
                profiler.enable()
                status, reply, seconds = await call(app, path, body)
                profiler.disable()
                asyncio.to_thread = plain  # type: ignore[assignment]
            else:
                status, reply, seconds = await call(app, path, body)
            await asyncio.sleep(0.02)  # the work after the reply, as an agent's pause allows
            if status != 200:
                raise SystemExit(f"{target}: {status} {reply[:300]!r}")
            got = spans.take()
            got["total"] = seconds
            out[target] = got
        print(json.dumps(out), flush=True)
    if profiler is not None:
        import pstats

        stats = pstats.Stats(profiler, stream=sys.stderr)
        # ``--profile-filter``: only functions whose path matches it (a regular expression).
        only = os.environ.get("GWSTEPS_PROFILE_FILTER", "")
        stats.sort_stats("tottime").print_stats(only, 35)
        stats.sort_stats("cumulative").print_stats(only, 60)
    await guarded.state.gateway.aclose()
    await bare_gateway.aclose()


def _breakdown(s: dict[str, float]) -> dict[str, float]:
    """One step's rows (seconds) from its raw spans: disjoint parts of `Gateway.guarded`, and
    what is left of it (``rest``)."""
    hops = {k[len("hop wait: ") :]: v for k, v in s.items() if k.startswith("hop wait: ")}
    less = {k[len("hop less run: ") :]: v for k, v in s.items() if k.startswith("hop less run: ")}
    g = s.get
    before_send = sum(v for k, v in hops.items() if k in BEFORE_SEND)
    refresh_hop = hops.get("_refresh", 0.0) + hops.get("_resume_or_create", 0.0)
    count_hop = hops.get("count", 0.0)
    rows = {
        "total": g("total", 0.0),
        "Starlette + response (outside guarded)": g("total", 0.0) - g("guarded", 0.0),
        "guarded": g("guarded", 0.0),
        "body read": g("body read", 0.0),
        "JSON parse (orjson.loads + checks)": g("parse + depth", 0.0) - g("depth check", 0.0),
        "depth check (+ item keys)": g("depth check", 0.0),
        "translate (API parse)": g("translate", 0.0),
        "identity/chain": g("identity/chain", 0.0),
        "session lookup (less a store hop)": g("session lookup", 0.0) - refresh_hop,
        "blocking work before the send, hops included": before_send,
        "  store refresh (run)": g("refresh (run)", 0.0),
        "  decision: BudgetSession.prepare (run)": g("prepare (run)", 0.0),
        "  hop cost (wait less run)": sum(v for k, v in less.items() if k in BEFORE_SEND),
        "upstream headers": g("upstream headers", 0.0),
        "send, less its count hop": g("send", 0.0) - count_hop,
        "  forward-body build": g("forward-body build", 0.0),
        "  upstream send (to its headers)": g("upstream send", 0.0),
        "  upstream read": g("upstream read", 0.0),
        "truncation check (hop)": hops.get("_truncated", 0.0),
        "  its hop cost (wait less run)": less.get("_truncated", 0.0),
        "sent (conversation's endpoint)": g("sent", 0.0),
        "record usage": g("record usage", 0.0),
        "after reply (awaited part)": g("after reply (awaited)", 0.0),
        "metrics + log line": g("metrics + log", 0.0),
    }
    top = [k for k in rows if not k.startswith(" ") and k not in ("total", "guarded")]
    top.remove("Starlette + response (outside guarded)")
    rows["rest of guarded"] = rows["guarded"] - sum(rows[k] for k in top)
    rows["counter.count, every call (run)"] = g("counter.count, all calls (run)", 0.0)
    rows["after-reply work (off the path)"] = g("after-reply work (off path)", 0.0)
    return rows


def report(size: int, results: dict[str, list[dict[str, Any]]]) -> str:
    """The breakdown table of one size: a column per tree, medians over the steps, in ms."""
    names = list(results)
    first = results[names[0]]
    tokens = statistics.median(r["tokens"] for r in first)
    size_bytes = statistics.median(r["bytes"] for r in first)
    lines = [
        f"\n~{tokens:,.0f} tokens ({size_bytes:,.0f} bytes), {len(first)} steps a tree, "
        "medians in ms",
        "",
        "| span | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    columns: dict[str, dict[str, float]] = {}
    for name in names:
        steps = [_breakdown(r["ctxbudget"]) for r in results[name]]
        column = {k: 1000 * statistics.median(s[k] for s in steps) for k in steps[0]}
        column["hops on the path"] = statistics.median(
            r["ctxbudget"].get("hops on the path", 0.0) for r in results[name]
        )
        bare = [r["bare"]["total"] for r in results[name]]
        column["bare route total"] = 1000 * statistics.median(bare)
        column["total − bare (same request)"] = 1000 * statistics.median(
            r["ctxbudget"]["total"] - r["bare"]["total"] for r in results[name]
        )
        columns[name] = column
    for key in columns[names[0]]:
        fmt = "{:.0f}" if key == "hops on the path" else "{:.3f}"
        cells = [fmt.format(columns[n][key]) for n in names]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Start the upstream and one worker per tree; alternate their steps; print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,35000,130000")
    parser.add_argument("--conversations", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--profile", type=int, metavar="SIZE")
    parser.add_argument("--profile-filter", default="", metavar="REGEX", help="with --profile")
    parser.add_argument("--worker", nargs=2, metavar=("UPSTREAM", "MAX_SIZE"), help="internal")
    parser.add_argument("--worker-profile", type=int, help="internal")
    args = parser.parse_args(argv)
    if args.worker:
        asyncio.run(worker(args.worker[0], int(args.worker[1]), args.worker_profile))
        return
    sizes = [args.profile] if args.profile else [int(s) for s in args.sizes.split(",")]
    trees = {"this tree": HERE.parent}
    if args.profile is None:
        trees |= {k: Path(v) for k, v in (t.split("=", 1) for t in args.tree)}
    bench = _load_bench()
    where = Path(tempfile.mkdtemp(prefix="ctxbudget-gwsteps-"))
    upstream = bench.start_upstream(where, 1_000_000)
    workers: dict[str, subprocess.Popen[str]] = {}
    try:
        bench.post_table(upstream, bench.build_template(max(sizes) + 8_000))
        for name, tree in trees.items():
            cmd = [sys.executable, __file__, "--worker", upstream.url, str(max(sizes))]
            if args.profile:
                cmd += ["--worker-profile", str(args.profile)]
            env = {**os.environ, "PYTHONPATH": str(tree / "src")}
            env["GWSTEPS_PROFILE_FILTER"] = args.profile_filter
            workers[name] = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
            )
        for proc in workers.values():
            assert proc.stdout is not None
            json.loads(proc.stdout.readline())
        for size in sizes:
            results: dict[str, list[dict[str, Any]]] = {n: [] for n in workers}
            # Below `SMALL` tokens a conversation is measured over 1 step (and more of them),
            # so that its requests stay near the size (as bench/gateway.py does).
            small = size < bench.SMALL
            conversations = args.conversations * args.steps if small else args.conversations
            steps = 1 if small else args.steps
            for c in range(conversations):
                for s in range(steps + 1):
                    names = list(workers) if (c + s) % 2 == 0 else list(workers)[::-1]
                    for name in names:
                        targets = ["ctxbudget", "bare"] if s % 2 == 0 else ["bare", "ctxbudget"]
                        proc = workers[name]
                        assert proc.stdin is not None and proc.stdout is not None
                        cmd = {"size": size, "conversation": c, "step": s, "targets": targets}
                        proc.stdin.write(json.dumps(cmd) + "\n")
                        proc.stdin.flush()
                        line = proc.stdout.readline()
                        if not line:
                            raise SystemExit(f"worker {name} ended")
                        if s > 0:
                            results[name].append(json.loads(line))
            if args.profile is None:
                print(report(size, results), flush=True)
    finally:
        for proc in workers.values():
            with contextlib.suppress(Exception):
                assert proc.stdin is not None
                proc.stdin.close()
            with contextlib.suppress(Exception):
                proc.wait(timeout=60)
        upstream.stop()


if __name__ == "__main__":
    main()
