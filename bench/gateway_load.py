"""A bounded load run of `ctxbudget serve` (issue 29): many agents at once, each a ~32K-token
conversation growing step by step, through two gateway instances sharing their state, in
front of a loopback upstream whose window is smaller than the conversations; and what
litellm's proxy and the gateway each forward when a conversation is over the window.

Run: PYTHONPATH=$PWD/src .venv/bin/python bench/gateway_load.py [--conversations 200]
     [--steps 20] [--size 32000] [--window 24000] [--instances 2] [--state redis|sqlite]
     [--shared-archives] [--litellm /path/to/venv/bin/python] [--no-write] [--out DIR]
The instances are started from `GatewayConfig` as `ctxbudget serve` runs them when the CLI
cannot say what is asked (a redis:// state, an archive folder per instance): see
bench/gateway.py `SERVE_APP`.

The client is an asyncio one (httpx), not locust: one process drives every conversation with
the same bodies the latency bench sends, and it must read the gateway's headers and the
upstream's record to check the run, which locust's per-user model does not make simpler.
Each conversation's steps go to the instances in turn (step s to instance (c + s) mod N), so
every instance serves every conversation and only the shared state keeps them consistent.
The upstream counts every request exactly (o200k_base, as the gateways), answers a request
over its window with vLLM's 400 error and records it, and records every summary call
(ctxbudget's summarizer prompt) with the conversation it was for: "every compaction done
once" is checked as no two summary calls with the same input and the number of summary
calls per conversation. The same conversations sent straight to an upstream without a window
give the baseline for the overhead. Writes its block of bench/gateway.md.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

# The latency bench's harness, beside this file (bench/ is not a package).
from blocks import (  # bench/blocks.py: a script's block of its .md, prose kept
    add_out_argument,
    write_block,
)
from gateway import (
    HEADERS,
    Child,
    Sample,
    Template,
    build_template,
    chat_body,
    free_port,
    litellm_python,
    load_conditions,
    new_tag,
    percentile,
    post_table,
    send,
    start_gateway,
    start_litellm,
    start_upstream,
    upstream_stats,
)


def start_redis(where: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A private redis-server on a free loopback port, nothing saved to disk."""
    port = free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(where),
        ],
        stdout=(where / "redis.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done = subprocess.run(
            ["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True, check=False
        )
        if done.stdout.strip() == "PONG":
            return proc, f"redis://127.0.0.1:{port}/0"
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("redis-server did not start: see redis.log")


async def run_agents(
    urls: Sequence[str],
    template: Template,
    size: int,
    conversations: int,
    steps: int,
) -> tuple[list[Sample], float]:
    """Every conversation at once, each step to the instances in turn; (samples, wall s)."""
    import httpx

    begin = template.start(size)
    samples: list[Sample] = []

    async def agent(c: int) -> None:
        tag = new_tag()
        # one client (one keep-alive connection) per agent, as agents run: one shared pool of
        # hundreds of connections costs httpx more than the requests (its pool scan is
        # quadratic), which would measure the client
        async with httpx.AsyncClient(timeout=300) as client:
            for s in range(steps):
                n = template.ends[begin + s]
                body = chat_body(template.messages(tag, n), stream=True)
                url = urls[(c + s) % len(urls)] + "/chat/completions"
                try:
                    samples.append(await send(client, url, body, True, template.tokens[n]))
                except httpx.HTTPError as error:  # counted as an error, the agent goes on
                    samples.append(Sample(0.0, 599, template.tokens[n], {"error": repr(error)}))
        template.forget(tag)

    start = time.perf_counter()
    await asyncio.gather(*(agent(c) for c in range(conversations)))
    return samples, time.perf_counter() - start


async def over_window_probe(
    targets: dict[str, str], upstream: Child, template: Template, sizes: Sequence[int]
) -> list[dict[str, Any]]:
    """One new conversation of each size sent once to each target: what the upstream got
    (the prompt sizes it saw, summary calls included) and what the client got back."""
    import httpx

    rows = []
    base = upstream.url.rsplit("/v1", 1)[0]
    async with httpx.AsyncClient(timeout=300) as client:
        for size in sizes:
            n = template.ends[template.start(size)]
            for name, url in targets.items():
                await client.post(base + "/_bench/reset")
                body = chat_body(template.messages(new_tag(), n), stream=False)
                reply = await client.post(url + "/chat/completions", content=body, headers=HEADERS)
                stats = upstream_stats(upstream)
                message = ""
                if reply.status_code != 200:
                    message = str(reply.json().get("error", {}).get("message", ""))[:120]
                rows.append(
                    {
                        "size": template.tokens[n],
                        "target": name,
                        "status": reply.status_code,
                        "prompts": stats["prompts"],
                        "summaries": stats["summaries"],
                        "over_window": stats["over_window"],
                        "compacted": reply.headers.get("x-ctxbudget-compacted", ""),
                        "message": message,
                    }
                )
                print(rows[-1], flush=True)
    return rows


def latency(samples: Sequence[Sample]) -> tuple[float, float]:
    """p50 and p99 in ms of the successful requests."""
    ok = [s.seconds for s in samples if s.status == 200]
    return percentile(ok, 0.5) * 1e3, percentile(ok, 0.99) * 1e3


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the flags, run the load, the baseline and the probe, write the block."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--size", type=int, default=32_000, help="tokens at the first step")
    parser.add_argument("--window", type=int, default=24_000, help="the upstream's window")
    parser.add_argument("--instances", type=int, default=2, help="0: harness check, no gateway")
    parser.add_argument(
        "--state",
        choices=("redis", "sqlite"),
        default="redis",
        help="what the instances share: one SQLite file, or a private redis-server",
    )
    parser.add_argument(
        "--shared-archives",
        action="store_true",
        help="one archive folder for every instance (next to the state), as the CLI has it",
    )
    parser.add_argument("--litellm", metavar="PYTHON", help="a Python with litellm[proxy]")
    parser.add_argument("--probe-sizes", default="32000,128000")
    parser.add_argument("--no-write", action="store_true")
    add_out_argument(parser)
    args = parser.parse_args(argv)
    probe_sizes = [int(s) for s in args.probe_sizes.split(",")]
    started = time.time()
    template = build_template(max([args.size, *probe_sizes]) + 16_000)
    print(f"template ready in {time.time() - started:.1f} s", flush=True)
    where = Path(tempfile.mkdtemp(prefix="ctxbudget-gwload-"))
    children: list[Child] = []
    redis: subprocess.Popen[bytes] | None = None
    try:
        upstream = start_upstream(where, args.window)
        direct = start_upstream(where, 10_000_000)
        children += [upstream, direct]
        # the baseline's upstream looks the unchanged conversations' sizes up (as the latency
        # bench's does); the gateways' upstream counts every request it gets
        post_table(direct, template)
        if args.state == "redis" and shutil.which("redis-server") is None:
            print("no redis-server on this machine: the instances share a SQLite file", flush=True)
            args.state = "sqlite"
        if args.state == "redis":
            redis, state = start_redis(where)
        else:
            state = str(where / "shared.sqlite3")
        # Each instance keeps its own archive folder, as on two machines: an archive is
        # locked by the process that has it open, so two instances on one folder refuse each
        # other's conversations (what --shared-archives shows).
        gateways = [
            start_gateway(
                where,
                upstream.url,
                args.window,
                name=f"gateway-{i}",
                state=state,
                archives=None if args.shared_archives else str(where / f"archives-{i}"),
            )
            for i in range(args.instances)
        ]
        children += gateways
        conditions = load_conditions()
        if gateways:  # warm each instance (imports, tokenizer) on a conversation of its own
            asyncio.run(run_agents([g.url for g in gateways], template, 1_000, len(gateways), 2))
        subprocess_reset(upstream)
        base_samples, base_wall = asyncio.run(
            run_agents([direct.url], template, args.size, args.conversations, args.steps)
        )
        print(f"direct: {len(base_samples)} requests in {base_wall:.1f} s", flush=True)
        if not gateways:  # the harness alone: the baseline and what litellm forwards
            p50, p99 = latency(base_samples)
            print(f"direct p50 / p99 ms: {p50:.1f} / {p99:.1f}", flush=True)
            lite_python = litellm_python(args.litellm)
            if lite_python:
                lite = start_litellm(where, lite_python, upstream.url)
                children.append(lite)
                asyncio.run(
                    over_window_probe({"litellm": lite.url}, upstream, template, probe_sizes)
                )
            return
        samples, wall = asyncio.run(
            run_agents(
                [g.url for g in gateways], template, args.size, args.conversations, args.steps
            )
        )
        print(f"gateways: {len(samples)} requests in {wall:.1f} s", flush=True)
        if any(s.status != 200 for s in samples):  # say why, from the instances' own logs
            for g in gateways:
                print(f"--- {g.name} log (end):\n{g.log.read_text()[-3000:]}", flush=True)
        conditions += f" at the start, {load_conditions()} at the end"
        stats = upstream_stats(upstream)
        rss = {g.name: g.rss_kb() / 1024 for g in gateways}
        targets = {"ctxbudget": gateways[0].url}
        lite_python = litellm_python(args.litellm)
        if lite_python is None:
            print("litellm[proxy] not found: no litellm row (see --litellm)", flush=True)
        else:
            lite = start_litellm(where, lite_python, upstream.url)
            children.append(lite)
            targets["litellm"] = lite.url
        probe = asyncio.run(over_window_probe(targets, upstream, template, probe_sizes))
        text = render(
            args, state, samples, wall, base_samples, base_wall, stats, rss, probe, conditions, argv
        )
        print(text)
        if not args.no_write:
            write_block(args.out / "gateway.md", "gateway_load.py", text)
    finally:
        for child in children:
            child.stop()
        if redis is not None:
            redis.terminate()
            redis.wait(10)
        shutil.rmtree(where, ignore_errors=True)


def subprocess_reset(upstream: Child) -> None:
    """Forget what the upstream recorded so far (the warm-up)."""
    import httpx

    httpx.post(upstream.url.rsplit("/v1", 1)[0] + "/_bench/reset", timeout=30).raise_for_status()


def render(
    args: argparse.Namespace,
    state: str,
    samples: list[Sample],
    wall: float,
    base_samples: list[Sample],
    base_wall: float,
    stats: dict[str, Any],
    rss: dict[str, float],
    probe: list[dict[str, Any]],
    conditions: str,
    argv: Sequence[str] | None,
) -> str:
    """This script's block of bench/gateway.md."""
    flags = " ".join(sys.argv[1:] if argv is None else argv)
    errors = [s for s in samples if s.status != 200]
    p50, p99 = latency(samples)
    b50, b99 = latency(base_samples)
    sent = [s.tokens for s in samples]
    by_tag = Counter(stats["summaries_by_tag"].values())
    compacted = sum(s.headers.get("x-ctxbudget-compacted") == "1" for s in samples)
    store = "Redis (a private redis-server)" if state.startswith("redis") else "one SQLite file"
    shared = f"{args.instances} instances sharing {store}"
    if args.instances == 1:
        shared = "1 instance (its own SQLite file)"
    lines = [
        "Command:",
        "",
        f"    PYTHONPATH=$PWD/src .venv/bin/python bench/gateway_load.py {flags}".rstrip(),
        "",
        f"Conditions: {conditions}. {args.conversations} conversations at once × {args.steps} "
        f"steps, streamed, through {shared}; the client "
        f"sends {min(sent):,}–{max(sent):,} tokens a request (mean "
        f"{int(statistics.mean(sent)):,}); the upstream's window is {args.window:,}.",
        "",
        "| what | value |",
        "|---|---:|",
        f"| requests | {len(samples):,} |",
        f"| errors (not HTTP 200) | {len(errors)} |",
        f"| requests over the window that reached the upstream | {stats['over_window']} |",
        f"| largest prompt the upstream got (tokens) | {stats['max_prompt']:,} |",
        f"| replies with x-ctxbudget-compacted: 1 | {compacted:,} |",
        f"| summary calls at the upstream | {stats['summaries']} |",
        f"| summary calls with the same input twice or more | {stats['duplicate_summaries']} |",
        "| conversations by summary calls | "
        + ", ".join(f"{n} call(s): {k}" for n, k in sorted(by_tag.items()))
        + f" (of {args.conversations}) |",
        f"| requests/s through the gateways | {len(samples) / wall:.1f} |",
        f"| requests/s straight to the upstream (same conversations, no window) "
        f"| {len(base_samples) / base_wall:.1f} |",
        f"| latency p50 / p99 through the gateways (ms) | {p50:.1f} / {p99:.1f} |",
        f"| latency p50 / p99 straight to the upstream (ms) | {b50:.1f} / {b99:.1f} |",
        f"| overhead p50 / p99 (ms, difference of the percentiles) "
        f"| {p50 - b50:.1f} / {p99 - b99:.1f} |",
        *(f"| RSS of {name} at the end (MB) | {mb:.1f} |" for name, mb in rss.items()),
    ]
    if errors:
        kinds = Counter(f"HTTP {s.status}" for s in errors)
        lines.append(f"| errors by kind | {dict(kinds)} |")
    lines += [
        "",
        f"Over the window ({args.window:,} tokens): one new conversation sent once to each "
        "proxy, in front of the same upstream; what the upstream received, and what came back:",
        "",
        "| conversation tokens | proxy | upstream got (prompt tokens, in order) "
        "| summary calls | over the window | client got |",
        "|---:|---|---|---:|---:|---|",
    ]
    for r in probe:
        got = "200" if r["status"] == 200 else f"{r['status']}: {r['message']}"
        prompts = ", ".join(f"{p:,}" for p in r["prompts"])
        lines.append(
            f"| {r['size']:,} | {r['target']} | {prompts} | {r['summaries']} "
            f"| {r['over_window']} | {got} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
