"""Engine throughput and concurrency on this machine (CPU by default).

1. Throughput, one seeded mixed workload (prompts 16..512, outputs 16..256 tokens, EOS ignored),
   one tiny random-weight model: the kvplan engine vs transformers `generate` on static padded
   batches vs transformers' continuous batching (`ContinuousBatchingManager`, page size 16, the
   same KV blocks and token budget). Goals: >= 2x static, >= 1.5x continuous batching.
2. Concurrency at equal KV memory on a chat mix (prompt ~500, output ~150, max_model_len 4096):
   the paged allocator vs contiguous preallocation on the same engine. Goal: >= 4x.
3. Paged decode attention vs SDPA on contiguous K/V (the issue's aim: within 1.5x).

    python benchmarks/engine_throughput.py            # full run (~2.5 minutes on 2 CPU cores)
    python benchmarks/engine_throughput.py --quick    # smaller workload, ~40 seconds

Timings on a shared machine vary by +-30% between runs; compare ratios from one run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from transformers import GenerationConfig  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from kvplan.engine import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from kvplan.engine.attention import AttentionMetadata, torch_paged_attention  # noqa: E402
from kvplan.engine.kv_cache import KVCache  # noqa: E402
from kvplan.engine.model_runner import random_model  # noqa: E402
from kvplan.plan.kv import bytes_per_block  # noqa: E402
from kvplan.spec.profiles import load_model, model_profile  # noqa: E402

Request = tuple[list[int], int]  # (prompt token ids, output tokens)


@dataclass(frozen=True)
class Throughput:
    name: str
    output_tokens: int
    seconds: float

    @property
    def tok_per_s(self) -> float:
        return self.output_tokens / self.seconds


def build_model(name: str, seed: int = 0) -> torch.nn.Module:
    """The HF model of a bundled profile, random weights under `torch.manual_seed(seed)`, float32."""
    return random_model(model_profile(name)["config"], torch.float32, seed)


def workload(
    n: int, prompt_range: tuple[int, int], output_range: tuple[int, int], seed: int, vocab: int
) -> list[Request]:
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(prompt_range[0], prompt_range[1] + 1, (n,), generator=g).tolist()
    outputs = torch.randint(output_range[0], output_range[1] + 1, (n,), generator=g).tolist()
    return [(torch.randint(3, vocab, (p,), generator=g).tolist(), o) for p, o in zip(prompts, outputs)]


# --- 1. throughput ----------------------------------------------------------------------------
def run_kvplan(model, work: list[Request], config: EngineConfig) -> tuple[Throughput, list[list[int]]]:
    engine = LLMEngine(model, config)
    engine.generate([work[0][0][:16]], SamplingParams(max_tokens=2, ignore_eos=True, temperature=0.0))  # warm-up
    start = time.perf_counter()
    out = engine.generate(
        [p for p, _ in work], [SamplingParams(max_tokens=o, ignore_eos=True, temperature=0.0) for _, o in work]
    )
    seconds = time.perf_counter() - start
    return Throughput("kvplan engine", sum(map(len, out)), seconds), out


@torch.inference_mode()
def run_static(model, work: list[Request], batch_size: int) -> Throughput:
    """Arrival-order batches, left-padded; a batch decodes until its longest request is done.
    Only the tokens each request asked for count."""
    start = time.perf_counter()
    for i in range(0, len(work), batch_size):
        batch = work[i:i + batch_size]
        width = max(len(p) for p, _ in batch)
        ids = torch.tensor([[0] * (width - len(p)) + p for p, _ in batch])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in batch])
        cfg = GenerationConfig(
            max_new_tokens=max(o for _, o in batch), do_sample=False, eos_token_id=None, pad_token_id=0
        )
        model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
    return Throughput(
        f"transformers static batches of {batch_size}", sum(o for _, o in work), time.perf_counter() - start
    )


@torch.inference_mode()
def run_hf_continuous(
    model, work: list[Request], num_blocks: int, max_batch_tokens: int, max_num_seqs: int
) -> Throughput:
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    gen = GenerationConfig(max_new_tokens=max(o for _, o in work), do_sample=False, eos_token_id=-1, pad_token_id=0)
    cb = ContinuousBatchingConfig(page_size=16, num_blocks=num_blocks, max_batch_tokens=max_batch_tokens,
                                  max_requests_per_batch=max_num_seqs)
    manager = model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)
    manager.start()
    try:
        start = time.perf_counter()
        for i, (prompt, n) in enumerate(work):
            manager.add_request(prompt, request_id=f"r{i}", max_new_tokens=n)
        done: dict[str, int] = {}
        while len(done) < len(work):
            result = manager.get_result(timeout=600)
            if result is None:
                raise RuntimeError("transformers continuous batching stopped early")
            if result.is_finished():
                done[result.request_id] = len(result.generated_tokens)
        seconds = time.perf_counter() - start
    finally:
        manager.stop(block=True)
    return Throughput("transformers continuous batching (page 16)", sum(done.values()), seconds)


# --- 2. concurrency ---------------------------------------------------------------------------
def run_concurrency(model, work: list[Request], allocator: str, kv_bytes: int, max_model_len: int,
                    max_steps: int) -> dict:
    config = EngineConfig(max_model_len=max_model_len, kv_cache_memory_bytes=kv_bytes, allocator=allocator,
                          max_num_seqs=256, max_num_batched_tokens=2048)
    engine = LLMEngine(model, config)
    for prompt, n in work:
        engine.add_request(prompt, SamplingParams(max_tokens=n, ignore_eos=True, temperature=0.0))
    running, tokens, start = [], 0, time.perf_counter()
    while engine.has_unfinished_requests() and len(running) < max_steps:
        tokens += len(engine.step())
        running.append(engine.stats.num_running)
    seconds = time.perf_counter() - start
    steady = running[len(running) // 4:] or running  # skip the ramp-up
    return dict(allocator=allocator, num_gpu_blocks=engine.num_gpu_blocks, peak_running=max(running),
                mean_running=sum(steady) / len(steady), steps=len(running), output_tokens=tokens,
                tok_per_s=tokens / seconds, preemptions=engine.stats.total_preemptions)


# --- 3. attention -----------------------------------------------------------------------------
def attention_overhead(model_name: str, batch: int, context: int, repeats: int = 20) -> dict:
    """Decode step of `batch` sequences of `context` tokens: paged (gather + SDPA) vs SDPA on K/V
    that already sit contiguous."""
    spec = load_model(model_name)
    layer = spec.layers[0]
    heads, kvh, dim, bs = spec.num_attention_heads, layer.num_kv_heads, layer.head_dim_k, 16
    nb = -(-context // bs)
    cache = KVCache(spec, batch * nb, bs, "float32", torch.float32)
    perm = torch.randperm(batch * nb).tolist()
    tables = [perm[b * nb:(b + 1) * nb] for b in range(batch)]
    meta = AttentionMetadata.build(
        tables,
        [1] * batch,
        [context] * batch,
        [t[(context - 1) // bs] * bs + (context - 1) % bs for t in tables],
        bs,
        torch.device("cpu"),
    )
    q, k, v = torch.randn(batch, heads, dim), torch.randn(batch, kvh, dim), torch.randn(batch, kvh, dim)
    keys, values = torch.randn(batch, kvh, context, dim), torch.randn(batch, kvh, context, dim)

    def paged():
        cache.write(0, meta.slot_mapping, k, v)
        torch_paged_attention(q, k, v, cache, 0, meta, dim ** -0.5)

    def dense():  # the fastest contiguous form here: query heads packed per KV head, no mask
        F.scaled_dot_product_attention(q.view(batch, kvh, -1, dim), keys, values, scale=dim ** -0.5)

    timings = {}
    for name, fn in (("paged_ms", paged), ("contiguous_sdpa_ms", dense)):
        fn()
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        timings[name] = (time.perf_counter() - start) / repeats * 1e3
    timings["ratio"] = timings["paged_ms"] / timings["contiguous_sdpa_ms"]
    return dict(batch=batch, context=context, **timings)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller workloads (CI smoke run)")
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--requests", type=int, default=None, help="throughput requests (default 128, quick 32)")
    ap.add_argument("--static-batch-sizes", default="16,32,64", help="static batch sizes tried; the best counts")
    ap.add_argument("--skip-hf", action="store_true", help="skip both transformers baselines")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    hf_logging.set_verbosity_error()
    import logging
    logging.getLogger("ContinuousBatchingLogger").setLevel(logging.CRITICAL)

    model = build_model(args.model)
    spec = load_model(args.model)
    n = args.requests or (32 if args.quick else 128)
    print(f"# {args.model} on {torch.get_num_threads()} CPU threads, torch {torch.__version__}")
    report: dict = {"model": args.model, "threads": torch.get_num_threads(), "quick": args.quick}

    # 1. throughput
    work = workload(n, (16, 512), (16, 256), args.seed, spec.vocab_size)
    bpb = bytes_per_block(spec, 16, "float32")
    num_blocks = 8192
    config = EngineConfig(max_model_len=1024, kv_cache_memory_bytes=num_blocks * bpb, max_num_seqs=256,
                          max_num_batched_tokens=2048)
    print(f"\n## Throughput: {n} requests, prompts 16..512, outputs 16..256 ({sum(o for _, o in work)} output tokens)")
    results = [run_kvplan(model, work, config)[0]]
    if not args.skip_hf:
        static = [run_static(model, work, int(b)) for b in args.static_batch_sizes.split(",")]
        for r in static:
            print(f"  ({r.name}: {r.tok_per_s:.1f} tok/s)")
        results.append(max(static, key=lambda r: r.tok_per_s))
        results.append(run_hf_continuous(model, work, num_blocks, 2048, 256))
    base = results[0].tok_per_s
    for r in results:
        ratio = "" if r is results[0] else f"  kvplan is {base / r.tok_per_s:.1f}x"
        print(f"{r.name:48s} {r.output_tokens:7d} tok {r.seconds:8.1f} s {r.tok_per_s:9.1f} tok/s{ratio}")
    report["throughput"] = [dict(asdict(r), tok_per_s=r.tok_per_s) for r in results]
    if len(results) == 3:
        report["speedup_vs_static"] = base / results[1].tok_per_s
        report["speedup_vs_hf_continuous"] = base / results[2].tok_per_s
        print(
            f"goal >= 2x static (best batch size): {report['speedup_vs_static']:.2f}x; goal >= 1.5x continuous "
            "batching: "
            f"{report['speedup_vs_hf_continuous']:.2f}x"
        )

    # 2. concurrency at equal KV memory
    reservations = 4 if args.quick else 16
    max_model_len = 4096
    kv_bytes = reservations * (max_model_len // 16) * bpb
    chat = workload(64 if args.quick else 160, (250, 750), (75, 225), args.seed + 1, spec.vocab_size)
    max_steps = 60 if args.quick else 200
    print(f"\n## Concurrency at equal KV memory: {kv_bytes / 2**20:.0f} MiB, chat mix (prompt ~500, output ~150), "
          f"max_model_len {max_model_len}, {len(chat)} requests, up to {max_steps} steps")
    rows = [run_concurrency(model, chat, a, kv_bytes, max_model_len, max_steps) for a in ("contiguous", "paged")]
    for row in rows:
        print(
            f"{row['allocator']:10s} blocks {row['num_gpu_blocks']:5d}  peak running {row['peak_running']:4d}  "
            f"mean running {row['mean_running']:6.1f}  {row['tok_per_s']:7.1f} tok/s  preemptions {row['preemptions']}"
        )
    report["concurrency"] = rows
    report["concurrency_ratio"] = rows[1]["peak_running"] / rows[0]["peak_running"]
    print(f"paged/contiguous peak concurrency: {report['concurrency_ratio']:.1f}x (goal >= 4x)")

    # 3. attention overhead
    att = attention_overhead(args.model, 32 if args.quick else 64, 512)
    report["attention"] = att
    print(f"\n## Decode attention, {att['batch']} x {att['context']} tokens: paged {att['paged_ms']:.2f} ms vs "
          f"contiguous SDPA {att['contiguous_sdpa_ms']:.2f} ms ({att['ratio']:.2f}x; aim <= 1.5x)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
