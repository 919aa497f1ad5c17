"""kvplan's load generator beside guidellm and AIPerf, in one run, against the same fast server.

The server answers every completion at once with the same 16-token SSE stream: nginx serving it as
a static file when nginx is installed (C, a few microseconds a request: the clients are the
bottleneck), else client_overhead.py's fake OpenAI server (Python asyncio, about as costly per
request as a client); either pinned to the last core. Each client runs pinned to
core 0 (`taskset -c 0`: "from one core"), the same closed loop: N users, each sending a 4-token
prompt and streaming 16 tokens, for R requests. Each tool's own figure is read from its own output
and put on one footing, completed requests / the tool's measured duration:

  kvplan    `kvplan stress --target URL` -> result.json metrics completed / duration
  guidellm  `guidellm run --scenario` (concurrent profile, synthetic_text) -> benchmarks.json
            request_totals.successful / duration
  AIPerf    `aiperf profile --concurrency N --request-count R` -> profile_export_aiperf.json
            request_count / benchmark_duration

Then `kvplan stress --workers 2` on both cores against `--workers 1` (the server shares them).
guidellm and AIPerf are not kvplan dependencies (guidellm pulls a CUDA torch): install each in a
virtualenv of its own and name it (`--guidellm /path/bin/guidellm --aiperf /path/bin/aiperf`); a
missing tool is skipped and said so. Both need a tokenizer for their synthetic prompts: a small
byte-level BPE one is trained here (offline).

    .venv/bin/python benchmarks/load_generators.py --guidellm /tmp/venv-guidellm/bin/guidellm \\
        --aiperf /tmp/venv-aiperf/bin/aiperf          # about 2 minutes on 2 cores
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client_overhead import FakeServer  # noqa: E402

KVPLAN = [sys.executable, "-m", "kvplan"]
WORDS = "the kv cache holds keys and values of every token in blocks of sixteen model memory page".split()


def _pin(cmd: list[str], core: int | None) -> list[str]:
    return (["taskset", "-c", str(core)] + cmd) if core is not None and shutil.which("taskset") else cmd


def bpe_tokenizer(folder: Path) -> Path:
    """A 400-token byte-level BPE tokenizer with a config.json (AIPerf and guidellm load it offline)."""
    import random

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(0)
    corpus = [" ".join(rng.choice(WORDS) for _ in range(30)) for _ in range(2000)]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>") \
        .save_pretrained(str(folder))
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "vocab_size": 400}))
    return folder


NGINX_CONF = """worker_processes 1;
daemon off;
error_log {root}/error.log crit;
pid {root}/nginx.pid;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  sendfile on;
  tcp_nopush on;
  open_file_cache max=16;  # the one response file stays open: no open/stat per request
  keepalive_requests 100000000;
  client_body_temp_path {root}/body;
  server {{
    listen 127.0.0.1:{port} backlog=8192;
    root {root}/www;
    location = /v1/completions {{ default_type text/event-stream; error_page 405 =200 $uri; }}
    location / {{ default_type application/json; error_page 405 =200 $uri; }}
  }}
}}
"""


class NginxServer:
    """nginx answering POST /v1/completions with a static 16-token stream (405 -> 200 on the file)."""

    def __init__(self, root: Path, core: int | None) -> None:
        import socket
        import time

        import httpx

        token = json.dumps({"id": "x", "object": "text_completion",
                            "choices": [{"index": 0, "text": " t", "finish_reason": None}]})
        usage = json.dumps({"id": "x", "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 16}})
        (root / "www" / "v1").mkdir(parents=True)
        stream = f"data: {token}\n\n" * 16 + f"data: {usage}\n\ndata: [DONE]\n\n"
        (root / "www" / "v1" / "completions").write_text(stream)
        (root / "www" / "v1" / "models").write_text('{"object":"list","data":[{"id":"fake","object":"model"}]}')
        (root / "www" / "health").write_text("")
        for folder in (root.parent, root, root / "www", root / "www" / "v1"):
            folder.chmod(0o755)  # nginx's worker reads as an unprivileged user when started as root
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        (root / "nginx.conf").write_text(NGINX_CONF.format(root=root, port=port))
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(_pin([str(shutil.which("nginx")), "-c", str(root / "nginx.conf")], core))
        for _ in range(100):
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("nginx did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def run_kvplan(url: str, users: int, requests: int, work: Path, core: int | None, workers: int = 1) -> float:
    out = work / f"kvplan-{workers}"
    cmd = _pin([*KVPLAN, "stress", "--target", url, "--model", "tiny-llama", "--server-kind", "openai",
                "--num-prompts", str(requests), "--max-concurrency", str(users), "--random-input-len", "4",
                "--random-output-len", "16", "--workers", str(workers), "--out", str(out), "--force",
                "--no-progress", "--json"], core)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    metrics = json.loads(done.stdout)["runs"][0]["metrics"]
    return metrics["completed"] / metrics["duration"]


def run_guidellm(exe: str, url: str, users: int, requests: int, tok: Path, work: Path, core: int | None) -> float:
    out = work / "guidellm.json"
    scenario = {"metadata": {"name": "kvplan-compare", "description": "closed loop"}, "spec": {
        "backend": {"kind": "openai_http", "target": url, "model": "fake", "request_format": "/v1/completions"},
        "profile": {"kind": "concurrent", "streams": [users]},
        "data": [{"kind": "synthetic_text", "prompt_tokens": 4, "output_tokens": 16}],
        "tokenizer": {"kind": "hf_auto", "model": str(tok)},
        "constraints": [{"kind": "max_requests", "count": requests}],
        "outputs": [{"kind": "json", "path": str(out)}]}}
    path = work / "guidellm-scenario.json"
    path.write_text(json.dumps(scenario))
    subprocess.run(_pin([exe, "run", "--scenario", str(path), "--disable-progress"], core), capture_output=True,
                   timeout=900, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=work)
    bench = json.loads(out.read_text())["benchmarks"][0]
    return bench["metrics"]["request_totals"]["successful"] / bench["duration"]


def run_aiperf(exe: str, url: str, users: int, requests: int, tok: Path, work: Path, core: int | None) -> float:
    out = work / "aiperf"
    # no HF_HUB_OFFLINE: AIPerf 0.13's offline path looks a local folder up as a cached repo id
    subprocess.run(_pin([exe, "profile", "--model", "fake", "--url", url, "--endpoint-type", "completions",
                         "--streaming", "--concurrency", str(users), "--request-count", str(requests),
                         "--synthetic-input-tokens-mean", "4", "--output-tokens-mean", "16", "--tokenizer", str(tok),
                         "--artifact-dir", str(out), "--ui-type", "none"], core),
                   capture_output=True, timeout=900, check=True, cwd=work)
    data = json.loads((out / "profile_export_aiperf.json").read_text())
    return data["request_count"]["avg"] / data["benchmark_duration"]["avg"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--guidellm", default=shutil.which("guidellm"))
    ap.add_argument("--aiperf", default=shutil.which("aiperf"))
    ap.add_argument("--users", type=int, default=64)
    ap.add_argument("--requests", type=int, default=2000)
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    client_core = 0 if cores > 1 else None
    rates: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        server: NginxServer | FakeServer
        if shutil.which("nginx"):
            server, kind = NginxServer(work / "nginx", cores - 1 if cores > 1 else None), "nginx"
        else:
            server, kind = FakeServer(0.0, 0.0), "the Python fake server"
            if cores > 1 and shutil.which("taskset"):
                subprocess.run(["taskset", "-a", "-p", "-c", str(cores - 1), str(server.proc.pid)], capture_output=True)
        try:
            tok = bpe_tokenizer(work / "tok")
            print(f"closed loop: {args.users} users x {args.requests} requests, 4-token prompts, 16 streamed tokens; "
                  f"each client on core {client_core}, {kind} on core {cores - 1}")
            rates["kvplan"] = run_kvplan(server.url, args.users, args.requests, work, client_core)
            for name, exe, fn in (("guidellm", args.guidellm, run_guidellm), ("AIPerf", args.aiperf, run_aiperf)):
                if exe is None or not Path(exe).exists():
                    print(f"  {name}: not installed (give --{name.lower()} PATH); skipped")
                    continue
                rates[name] = fn(exe, server.url, args.users, args.requests, tok, work, client_core)
            for name, rate in rates.items():
                ratio = "" if name == "kvplan" else f"   kvplan / {name}: {rates['kvplan'] / rate:.1f}x"
                print(f"  {name:>8}: {rate:>7,.0f} req/s{ratio}", flush=True)
            if cores > 1:
                one = run_kvplan(server.url, 256, 8 * args.requests, work, None, workers=1)
                two = run_kvplan(server.url, 256, 8 * args.requests, work, None, workers=2)
                print(f"kvplan --workers 2 vs 1 on all {cores} cores (256 users, {8 * args.requests} requests, {kind} "
                      f"on core {cores - 1} too): {two:,.0f} vs {one:,.0f} req/s, {two / one:.2f}x")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
