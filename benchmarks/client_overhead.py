"""How much does kvplan's HTTP client add to the latencies it measures, and how fast can it go?

A fake OpenAI server (raw asyncio HTTP/1.1 in a subprocess, so it costs as little CPU as
possible) answers every streaming completion with its first token `--ttft-ms` after the request
arrived and the next ones every `--itl-ms`, scheduled on absolute times so they never drift. It
stamps when it really sent each token (`/stamps`). The client (`run_http`, the code `kvplan
stress --target` runs) measures TTFT and ITL as usual. Reported per number of concurrent streams:

  err_nominal  mean measured / nominal - 1     (what a user would see against a perfect server)
  err_server   mean measured / mean server-side actual - 1   (the client's own share)
  cpu          the client process's CPU time / wall time (100% = one core: the asyncio client's ceiling)
  srv cpu      the same for the fake server process (it shares the machine's cores with the client)

Where the TTFT goes (means, ms): both processes stamp with `time.perf_counter()`, one system-wide
monotonic clock, but the client's records are relative to its run start, so the offset is taken as
the smallest (server receive - client send) over the run (a loopback one-way trip, ~0.05 ms).
  send         client send stamp -> server read the request. The client stamps and writes in one
               step (no await between on a pooled connection), so this is the server's loop lag
               reading it, plus a TCP connect when the request opened a new connection
  srv          server read the request -> server wrote the first token (nominal: --ttft-ms)
  recv         server wrote the first token -> client stamped it (kernel, client's loop lag)
send + srv + recv = the measured TTFT. A late `srv` or a large `send` is the server's share.

Two load shapes: "staggered" (open loop at rate C / request duration, so about C streams are in
flight, their tokens spread in time, as in real traffic) and "lockstep" (closed loop at C: all C
streams emit in the same instant every ITL, the worst case for a single-threaded client).
Then the requests per second the client sustains against a zero-latency server, and the client
CPU time per request (its capacity, whatever the server's speed).

    .venv/bin/python benchmarks/client_overhead.py            # about a minute on 2 cores
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from kvplan.stress.targets.openai_http import run_http  # noqa: E402
from kvplan.workload.request import Request


# --- the fake server (runs in its own process) ----------------------------------------------------
def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _response(status: str, body: bytes, ctype: str = "application/json") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


async def _serve(port: int, ttft_s: float, itl_s: float) -> None:
    stamps: dict[str, dict] = {}
    token = json.dumps(
        {"id": "x", "object": "text_completion", "choices": [{"index": 0, "text": " t", "finish_reason": None}]}
    )
    token_event = _chunk(f"data: {token}\n\n".encode())

    async def stream(writer: asyncio.StreamWriter, rid: str, n: int, t_recv: float) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        sends = []
        for i in range(n):
            delay = t_recv + ttft_s + i * itl_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sends.append(time.perf_counter())
            writer.write(token_event)
            await writer.drain()
        usage = json.dumps({"id": "x", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": n}})
        writer.write(_chunk(f"data: {usage}\n\ndata: [DONE]\n\n".encode()) + b"0\r\n\r\n")
        await writer.drain()
        stamps[rid] = {"recv": t_recv, "sends": sends}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # keep-alive: many requests per connection
                head = await reader.readuntil(b"\r\n\r\n")
                t_recv = time.perf_counter()
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                size = int(headers.get("content-length", "0"))
                body = await reader.readexactly(size) if size else b""
                if path == "/v1/completions":
                    n = int(json.loads(body)["max_tokens"])
                    await stream(writer, headers.get("x-request-id", "?"), n, t_recv)
                elif path == "/health":
                    writer.write(_response("200 OK", b""))
                elif path == "/v1/models":
                    writer.write(_response("200 OK", b'{"object":"list","data":[{"id":"fake","object":"model"}]}'))
                elif path.startswith("/stamps"):
                    writer.write(_response("200 OK", json.dumps(stamps).encode()))
                    stamps.clear()
                else:
                    writer.write(_response("404 Not Found", b"{}"))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


# --- the benchmark --------------------------------------------------------------------------------
class FakeServer:
    def __init__(self, ttft_ms: float, itl_ms: float) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", str(self.port), str(ttft_ms), str(itl_ms)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("the fake server did not start")

    def stamps(self) -> dict[str, dict]:
        return httpx.get(f"{self.url}/stamps", timeout=10).json()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _specs(n: int, tokens: int, arrivals_s: list[float] | None) -> list[Request]:
    return [
        Request.of_ids(
            index=i,
            request_id=f"r{i:06d}",
            class_name="c",
            arrival_s=None if arrivals_s is None else arrivals_s[i],
            prompt_token_ids=(5, 6, 7, 8),
            output_tokens=tokens,
            shared_prefix_id=None,
            shared_prefix_tokens=0,
            is_warmup=False,
        )
        for i in range(n)
    ]


def _proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of process `pid` so far; NaN where /proc is not there."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def timing_row(server: FakeServer, streams: int, shape: str, tokens: int, ttft_s: float, itl_s: float) -> dict:
    duration_s = ttft_s + (tokens - 1) * itl_s
    n = max(streams * 3, 10)
    arrivals = [i * duration_s / streams for i in range(n)] if shape == "staggered" else None
    wall0, cpu0, srv0 = time.perf_counter(), time.process_time(), _proc_cpu_s(server.proc.pid)
    out = run_http(_specs(n, tokens, arrivals), url=server.url, timeout_s=30.0,
                   concurrency=streams if shape == "lockstep" else None, scrape_interval_s=3600.0)
    wall_s = time.perf_counter() - wall0
    cpu_share = (time.process_time() - cpu0) / wall_s
    srv_share = (_proc_cpu_s(server.proc.pid) - srv0) / wall_s
    stamps = server.stamps()
    ok = [r for r in out.records if r.status == "ok"]
    ttft = [r.first_token_s - r.arrival_s for r in ok]
    itl = [g for r in ok for g in (b - a for a, b in zip(r.token_times_s, r.token_times_s[1:]))]
    s_ttft = [stamps[r.request_id]["sends"][0] - stamps[r.request_id]["recv"] for r in ok]
    s_itl = [g for r in ok for s in [stamps[r.request_id]["sends"]] for g in (b - a for a, b in zip(s, s[1:]))]
    offset_s = min(stamps[r.request_id]["recv"] - r.arrival_s for r in ok)  # client run clock -> perf_counter
    send = [stamps[r.request_id]["recv"] - (r.arrival_s + offset_s) for r in ok]
    recv = [(r.first_token_s + offset_s) - stamps[r.request_id]["sends"][0] for r in ok]
    spans = sorted((r.arrival_s, r.finish_s) for r in ok)
    peak = max(sum(1 for a, f in spans if a <= t < f) for t, _ in spans)
    p99 = lambda xs: statistics.quantiles(xs, n=100)[98]  # noqa: E731
    return {
        "streams": streams,
        "shape": shape,
        "requests": len(ok),
        "errors": len(out.records) - len(ok),
        "peak_in_flight": peak,
        "ttft_ms": 1e3 * statistics.fmean(ttft),
        "ttft_err_nominal": statistics.fmean(ttft) / ttft_s - 1,
        "ttft_err_server": statistics.fmean(ttft) / statistics.fmean(s_ttft) - 1,
        "ttft_p99_ms": 1e3 * p99(ttft),
        "itl_ms": 1e3 * statistics.fmean(itl),
        "itl_err_nominal": statistics.fmean(itl) / itl_s - 1,
        "itl_err_server": statistics.fmean(itl) / statistics.fmean(s_itl) - 1,
        "itl_p99_ms": 1e3 * p99(itl),
        "server_itl_p99_ms": 1e3 * p99(s_itl),
        "client_cpu_share": cpu_share,
        "server_cpu_share": srv_share,
        "send_ms": 1e3 * statistics.fmean(send),
        "srv_ttft_ms": 1e3 * statistics.fmean(s_ttft),
        "recv_ms": 1e3 * statistics.fmean(recv),
    }


def throughput_row(server: FakeServer, concurrency: int, tokens: int, n: int) -> dict:
    wall0, cpu0 = time.perf_counter(), time.process_time()
    out = run_http(
        _specs(n, tokens, None), url=server.url, timeout_s=30.0, concurrency=concurrency, scrape_interval_s=3600.0
    )
    wall_s, cpu_s = time.perf_counter() - wall0, time.process_time() - cpu0
    server.stamps()
    ok = sum(r.status == "ok" for r in out.records)
    return {"concurrency": concurrency, "tokens": tokens, "requests": ok, "req_per_s": ok / wall_s,
            "client_cpu_ms_per_req": 1e3 * cpu_s / ok, "client_capacity_req_per_s": ok / cpu_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--tokens", type=int, default=64, help="output tokens per request")
    ap.add_argument("--streams", default="1,64,256")
    ap.add_argument("--serve", nargs=3, metavar=("PORT", "TTFT_MS", "ITL_MS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        port, ttft_ms, itl_ms = args.serve
        asyncio.run(_serve(int(port), float(ttft_ms) / 1e3, float(itl_ms) / 1e3))
        return
    ttft_s, itl_s = args.ttft_ms / 1e3, args.itl_ms / 1e3
    server = FakeServer(args.ttft_ms, args.itl_ms)
    try:
        print(f"timing: nominal TTFT {args.ttft_ms:g} ms, ITL {args.itl_ms:g} ms, {args.tokens} tokens per request")
        print(
            f"{'streams':>7} {'shape':>9} {'reqs':>5} {'peak':>5} {'TTFT ms':>8} {'err nom':>8} {'err srv':>8} "
            f"{'p99':>7}"
            f" {'ITL ms':>7} {'err nom':>8} {'err srv':>8} {'p99':>7} {'srv p99':>7} {'cpu':>5} {'srv cpu':>7}"
            f" | {'send':>5} {'srv':>6} {'recv':>5}"
        )
        for streams in [int(s) for s in args.streams.split(",")]:
            for shape in ("staggered", "lockstep"):
                r = timing_row(server, streams, shape, args.tokens, ttft_s, itl_s)
                print(
                    f"{r['streams']:>7} {r['shape']:>9} {r['requests']:>5} {r['peak_in_flight']:>5} "
                    f"{r['ttft_ms']:>8.2f}"
                    f" {r['ttft_err_nominal']:>+8.2%} {r['ttft_err_server']:>+8.2%} {r['ttft_p99_ms']:>7.2f}"
                    f" {r['itl_ms']:>7.2f} {r['itl_err_nominal']:>+8.2%} {r['itl_err_server']:>+8.2%}"
                    f" {r['itl_p99_ms']:>7.2f} {r['server_itl_p99_ms']:>7.2f} {r['client_cpu_share']:>5.0%} "
                    f"{r['server_cpu_share']:>7.0%}"
                    f" | {r['send_ms']:>5.2f} {r['srv_ttft_ms']:>6.2f} {r['recv_ms']:>5.2f}",
                    flush=True,
                )
    finally:
        server.stop()
    server = FakeServer(0.0, 0.0)
    try:
        print("\nthroughput: zero-latency server, closed loop")
        print(
            f"{'conc':>5} {'tokens':>6} {'reqs':>5} {'req/s':>8} {'client CPU ms/req':>18} "
            f"{'client capacity req/s':>22}"
        )
        for concurrency, tokens, n in ((64, 1, 3000), (64, 16, 2000), (256, 16, 2000)):
            r = throughput_row(server, concurrency, tokens, n)
            print(f"{r['concurrency']:>5} {r['tokens']:>6} {r['requests']:>5} {r['req_per_s']:>8.0f}"
                  f" {r['client_cpu_ms_per_req']:>18.3f} {r['client_capacity_req_per_s']:>22.0f}", flush=True)
        print("\nworkers: the same closed loop (256 users, 16 tokens, 4000 requests) from 1 and 2 client processes")
        rates = {}
        for workers in (1, 2):
            rates[workers] = workers_row(server, workers, 256, 16, 4000)
            print(f"  --workers {workers}: {rates[workers]:>6.0f} req/s", flush=True)
        print(f"  ratio 2 / 1: {rates[2] / rates[1]:.2f}x (the fake server shares this machine's cores)")
    finally:
        server.stop()


def workers_row(server: FakeServer, workers: int, concurrency: int, tokens: int, n: int) -> float:
    """Requests/s over the run's own span (first send to last finish), as `kvplan stress --workers` reports it."""
    from kvplan.stress.targets.workers import run_http_workers

    run = run_http if workers == 1 else lambda reqs, **kw: run_http_workers(reqs, workers, **kw)
    out = run(_specs(n, tokens, None), url=server.url, timeout_s=30.0, concurrency=concurrency,
              scrape_interval_s=3600.0, server_kind="vllm")
    server.stamps()
    ok = [r for r in out.records if r.status == "ok"]
    span_s = max(r.finish_s for r in ok) - min(r.arrival_s for r in ok)
    return len(ok) / span_s


if __name__ == "__main__":
    main()
