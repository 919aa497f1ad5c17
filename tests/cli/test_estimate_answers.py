"""`kvplan estimate` gives answers a user can act on: the context asked about is the one planned,
impossible contexts are errors, a missing GPU says how to get a fit answer, weights that do not fit
are said first with the fixes that make them fit (combinations included), serve lines carry only
flags vLLM accepts, every KV figure names its scope and multiplies out, and no output cites files a
user does not have. Expected values are computed from the planner's own functions, never typed in.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from kvplan.cli import main
from kvplan.plan.budget import plan_capacity
from kvplan.plan.engine_args import EngineArgs
from kvplan.plan.explain import weights_fit, weights_per_gpu_bytes
from kvplan.plan.fixes import fixes_for, planned_serve_line, recommend
from kvplan.plan.kv import KvLayout
from kvplan.spec.dtypes import KV_DTYPES, VLLM_KV_CACHE_DTYPES
from kvplan.spec.gpu import load_gpu
from kvplan.spec.profiles import load_model
from kvplan.units import GIB

ROOT = Path(__file__).resolve().parents[2]


def run_cli(capsys, monkeypatch, *args: str) -> tuple[int, str, str]:
    monkeypatch.setenv("COLUMNS", "400")  # no wrapped table cells
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def run_json(capsys, monkeypatch, *args: str) -> dict:
    rc, out, err = run_cli(capsys, monkeypatch, *args, "--json")
    assert rc == 0, err
    return json.loads(out)


def table_rows(out: str) -> dict[str, list[str]]:
    """Rich table rows by their first cell (cells stripped)."""
    rows = {}
    for line in out.splitlines():
        if line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            rows[cells[0]] = cells[1:]
    return rows


def multiply_out(how: str) -> int:
    """The value a "how" text states: '+'-separated terms of '×'-separated factors, each factor's
    first number (parenthesised words dropped, '(128 × 0.5 B + 2 B scale)' evaluated)."""
    def factor(text: str) -> float:
        text = text.strip()
        if text.startswith("(") and "+" in text:
            return sum(product(part) for part in text.strip("()").split("+"))
        return float(re.search(r"\d[\d,]*(?:\.\d+)?", text).group().replace(",", ""))

    def product(term: str) -> float:
        value = 1.0
        for f in re.split(r" × (?![^(]*\))", term):
            value *= factor(re.sub(r"\((?![^)]*\+)[^)]*\)", "", f) or f)
        return value

    how = re.sub(r"\s*\((?:busiest|replicated|[\d,]+ / tp|K, V)[^)]*\)", "", how)
    return round(sum(product(t) for t in re.split(r" \+ (?![^(]*\))", how)))


# --- 1. --ctx defaults to --max-model-len -----------------------------------------------------------
def test_ctx_defaults_to_max_model_len(capsys, monkeypatch):
    data = run_json(capsys, monkeypatch, "estimate", "--model", "llama-3.1-8b-instruct", "--gpu", "4090",
                    "--max-model-len", "32768")
    assert data["ctx"] == data["max_model_len"] == data["vllm_max_model_len"] == 32768
    # the fit answer is for the requests vLLM's own line is about: whole requests of its fraction
    assert data["max_concurrency_at_ctx"] == int(data["max_concurrency"])
    rc, out, _ = run_cli(capsys, monkeypatch, "estimate", "--model", "llama-3.1-8b-instruct", "--gpu", "4090",
                         "--max-model-len", "32768")
    assert rc == 0 and "1 × 32,768 tokens on" in out and "1 × 4,096" not in out


# --- 2. beyond the model's maximum context: an error -----------------------------------------------
@pytest.mark.parametrize("flag", ["--ctx", "--max-model-len"])
@pytest.mark.parametrize("gpu", [[], ["--gpu", "4090"]])
def test_context_beyond_the_model_maximum_is_an_error(capsys, monkeypatch, flag, gpu):
    limit = load_model("llama-3.1-8b-instruct").max_position_embeddings
    rc, out, err = run_cli(capsys, monkeypatch, "estimate", "--model", "llama-3.1-8b-instruct", flag, "200000", *gpu)
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvplan: error:")
    assert f"{flag} 200000" in lines[0] and str(limit) in lines[0] and "Traceback" not in err


# --- 3. --ctx without --max-model-len: plan and serve line for that context -------------------------
def test_ctx_without_max_model_len_plans_that_context(capsys, monkeypatch):
    spec = load_model("llama-3.1-8b-instruct")
    data = run_json(
        capsys,
        monkeypatch,
        "estimate",
        "--model",
        "llama-3.1-8b-instruct",
        "--gpu",
        "4090",
        "--ctx",
        "8192",
        "--target-concurrency",
        "2",
    )
    assert data["max_model_len"] == data["vllm_max_model_len"] == 8192 and data["max_model_len_given"] is False
    assert data["vllm_fits"] is True and data["vllm_error"] is None
    assert "--max-model-len 8192" in data["recommended_command"]
    notes = " ".join(data["notes"])
    assert f"{spec.max_position_embeddings:,}" in notes and "--max-model-len 8192" in notes
    rc, out, _ = run_cli(
        capsys, monkeypatch, "estimate", "--model", "llama-3.1-8b-instruct", "--gpu", "4090", "--ctx", "8192"
    )
    assert rc == 0 and "ValueError" not in out and "--max-model-len 8192" in out
    assert f"vLLM's default would be llama-3.1-8b-instruct's maximum {spec.max_position_embeddings:,}" in out


def test_explicit_max_model_len_that_does_not_fit_keeps_vllms_error(capsys, monkeypatch):
    spec = load_model("llama-3.1-8b-instruct")
    data = run_json(
        capsys,
        monkeypatch,
        "estimate",
        "--model",
        "llama-3.1-8b-instruct",
        "--gpu",
        "4090",
        "--ctx",
        "8192",
        "--max-model-len",
        str(spec.max_position_embeddings),
    )
    assert data["vllm_fits"] is False and data["fits"] is False
    assert data["vllm_error"].startswith(f"ValueError: To serve at least one request with the model's max seq len "
                                         f"({spec.max_position_embeddings})")


# --- 4. no GPU: say there is no fit answer and how to get one ----------------------------------------
def test_no_gpu_says_how_to_get_a_fit_answer(capsys, monkeypatch):
    hint = "add --gpu NAME (kvplan gpus lists them) or --gpu-memory-gib N"
    rc, out, _ = run_cli(
        capsys, monkeypatch, "estimate", "--model", "llama-2-7b", "--ctx", "4096", "--concurrency", "8"
    )
    assert rc == 0 and hint in out
    data = run_json(capsys, monkeypatch, "estimate", "--model", "llama-2-7b", "--ctx", "4096", "--concurrency", "8")
    assert data["fits"] is None and hint in data["hint"]
    with_gpu = run_json(capsys, monkeypatch, "estimate", "--model", "llama-2-7b", "--gpu", "h100")
    assert "hint" not in with_gpu and with_gpu["fits"] in (True, False)


# --- 5. weights that do not fit: said first, fixes that make them fit ---------------------------------
def test_weights_that_do_not_fit_are_said_first(capsys, monkeypatch):
    spec, gpu = load_model("qwen3-30b-a3b"), load_gpu("4090")
    plan = plan_capacity(spec, EngineArgs(gpu=gpu, max_model_len=4096))
    rc, out, _ = run_cli(capsys, monkeypatch, "estimate", "--model", "qwen3-30b-a3b", "--gpu", "4090")
    assert rc == 0
    said = (
        f"weights {weights_per_gpu_bytes(plan) / GIB:.1f} GiB per GPU do not fit in {plan.requested_bytes / GIB:.1f} "
        "GiB "
        f"({gpu.memory_bytes / GIB:.1f} GiB x 0.9)"
    )
    assert said in out
    assert out.index(said) < out.index("ValueError: No available memory")
    data = run_json(capsys, monkeypatch, "estimate", "--model", "qwen3-30b-a3b", "--gpu", "4090")
    assert data["weights_fit"] is False and data["fits"] is False and said in data["memory_shortfall"]


def test_fixes_for_weights_that_do_not_fit_make_them_fit():
    spec = load_model("qwen3-30b-a3b")
    args = EngineArgs(gpu=load_gpu("4090"), max_model_len=4096)
    plan = plan_capacity(spec, args)
    assert not weights_fit(plan)
    fixes = fixes_for(spec, args, plan)
    assert fixes and all(f.plan is not None and weights_fit(f.plan) for f in fixes)
    assert all(f.fits == (f.max_concurrency is not None and f.max_concurrency >= 1) for f in fixes)
    by_title = {f.title: f for f in fixes}
    tp = by_title["tensor parallelism"]
    size = tp.plan.args.tensor_parallel_size
    assert tp.fits and size > 2  # TP 2 alone leaves the weights too big: the search goes on to the smallest that fits
    smaller = plan_capacity(spec, EngineArgs(gpu=load_gpu("4090"), max_model_len=4096, tensor_parallel_size=size // 2))
    assert not smaller.fits
    assert any(f.flags.startswith("--quantization") for f in fixes)  # weight quantization
    combined = [f for f in fixes if f.title.startswith("combined:")]
    assert combined and all(f.fits and "--quantization" in f.flags and f.gpus < tp.gpus for f in combined)
    assert "a bigger GPU" in by_title
    same_gpu = [f.gpus for f in fixes if not f.gpu_name]
    assert same_gpu == sorted(same_gpu) and fixes[-1].gpu_name  # fewest GPUs first, another GPU last


def test_target_concurrency_searches_combined_fixes():
    spec = load_model("llama-3.1-8b-instruct")
    args = EngineArgs(gpu=load_gpu("4090"), max_model_len=8192)
    plan = plan_capacity(spec, args)
    fixes = fixes_for(spec, args, plan, target_concurrency=64)
    tp_alone = next(f for f in fixes if f.title == "tensor parallelism")
    combined = [f for f in fixes if f.title.startswith("combined:")]
    assert any("--kv-cache-dtype fp8" in f.flags and "--tensor-parallel-size" in f.flags for f in combined)
    assert all(f.fits and f.plan.max_concurrency >= 64 and f.gpus < tp_alone.gpus for f in combined)
    rec = recommend(spec, args, 64)
    assert rec.met and rec.plan.max_concurrency >= 64
    assert rec.gpus < tp_alone.gpus  # not TP over as many GPUs as TP alone needs
    assert rec.gpus <= min(f.gpus for f in combined)


# --- 6. only flags vLLM accepts in `vllm serve` lines -------------------------------------------------
@pytest.mark.parametrize("kv", ["int4", "int8"])
def test_serve_line_never_carries_a_kv_dtype_vllm_lacks(capsys, monkeypatch, kv):
    for extra in ([], ["--kv-cache-memory-bytes", str(20 * GIB)]):
        rc, out, _ = run_cli(capsys, monkeypatch, "estimate", "--model", "llama-3.1-8b-instruct", "--gpu", "h100",
                             "--ctx", "8192", "--kv-cache-dtype", kv, "--target-concurrency", "4", *extra)
        assert rc == 0
        serve = [line for line in out.splitlines() if "vllm serve" in line]
        assert serve and all(f"--kv-cache-dtype {kv}" not in line for line in serve)
        assert "--kv-cache-dtype fp8" in serve[0] and "planned only" in out


def test_serve_command_kv_flags_are_vllm_choices():
    spec = load_model("llama-3.1-8b-instruct")
    plan = plan_capacity(spec, EngineArgs(gpu=load_gpu("h100"), max_model_len=4096))
    for name in KV_DTYPES:
        if name == "fp8_ds_mla":
            # DeepSeek-V3.2's sparse-MLA cache: refused for other models (tests/spec/test_deployed_profiles.py)
            continue
        line = planned_serve_line(spec, EngineArgs(gpu=load_gpu("h100"), kv_cache_dtype=name), plan, 1)
        flags = re.findall(r"--kv-cache-dtype (\S+)", line)
        assert all(f in VLLM_KV_CACHE_DTYPES for f in flags), (name, line)


# --- 7. per GPU and whole model, labelled and consistent across TP, MLA included -----------------------
def test_whole_model_kv_per_token_does_not_change_with_tp(capsys, monkeypatch):
    spec = load_model("deepseek-v3")
    whole = KvLayout.of(spec).bytes_per_token()
    tp1 = run_json(capsys, monkeypatch, "estimate", "--model", "deepseek-v3", "--gpu", "h200")
    tp8 = run_json(capsys, monkeypatch, "estimate", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8")
    assert tp1["kv_bytes_per_token"] == tp8["kv_bytes_per_token"] == whole
    assert tp8["kv_bytes_per_token_per_gpu"] == whole  # the latent is replicated on every TP rank
    assert tp8["kv_bytes_per_token_all_gpus"] == 8 * whole
    gqa = run_json(capsys, monkeypatch, "estimate", "--model", "llama-3-8b", "--tp", "2")
    assert (
        gqa["kv_bytes_per_token"]
        == 2 * gqa["kv_bytes_per_token_per_gpu"]
        == KvLayout.of(load_model("llama-3-8b")).bytes_per_token()
    )
    assert "whole model" in tp8["figure_scopes"] and "per GPU" in tp8["figure_scopes"]


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "deepseek-v3", "--tp", "8"],
        ["--model", "llama-3-8b", "--tp", "2", "--pp", "2"],
        ["--model", "gemma-3-27b", "--ctx", "8192"],
        ["--model", "llama-3-8b", "--kv-cache-dtype", "int4"],
    ],
)
def test_table_rows_name_their_scope_and_multiply_out(capsys, monkeypatch, args):
    rc, out, _ = run_cli(capsys, monkeypatch, "estimate", *args)
    assert rc == 0
    rows = table_rows(out)
    checked = 0
    for label, cells in rows.items():
        if not label.startswith(("KV per token", "KV per block", "KV per request", "KV total", "weights")):
            continue
        assert "(whole model)" in label or "(per GPU" in label or ", per GPU)" in label or "GPUs)" in label \
            or "whole model)" in label, label
        value = int(re.search(r"\(([\d,]+) B\)", cells[0]).group(1).replace(",", ""))
        how = cells[1].split(":")[0]
        if label.startswith(("KV per token (all", "weights")) or " − " in how or "calculators" in cells[1]:
            continue
        assert multiply_out(how) == value, (label, how, value)
        checked += 1
    assert checked >= 4


def test_every_differing_concurrency_figure_says_why(capsys, monkeypatch):
    rc, out, _ = run_cli(
        capsys, monkeypatch, "estimate", "--model", "gemma-3-27b", "--gpu", "h100", "--max-model-len", "32768"
    )
    assert rc == 0
    rows = table_rows(out)
    vllm_row = next(cells for label, cells in rows.items() if label.startswith("vLLM 'Maximum concurrency'"))
    ours = next(cells for label, cells in rows.items() if label.startswith("largest concurrency"))
    assert vllm_row[0] != ours[0]
    assert "differs from kvplan's" in vllm_row[1] and "sliding" in vllm_row[1]
    data = run_json(
        capsys, monkeypatch, "estimate", "--model", "gemma-3-27b", "--gpu", "h100", "--max-model-len", "32768"
    )
    assert data["max_concurrency_note"] and "window" in data["max_concurrency_note"]


# --- 8. no output cites files a user does not have ----------------------------------------------------
CITATIONS = re.compile(r"reference set|seed (article|section)|section \d+\.\d+|\.\./shared|shared/reference", re.I)


@pytest.mark.parametrize("args", [
    ["estimate", "--model", "llama-2-7b", "--ctx", "4096", "--concurrency", "8"],
    ["estimate", "--model", "qwen3-30b-a3b", "--gpu", "4090", "--target-concurrency", "4"],
    ["estimate", "--model", "gemma-3-27b", "--gpu", "h100", "--json"],
    ["profiles", "show", "llama-2-7b"], ["profiles", "show", "deepseek-v3", "--json"], ["gpus"], ["gpus", "--json"],
])
def test_output_cites_no_files_the_user_lacks(capsys, monkeypatch, args):
    rc, out, err = run_cli(capsys, monkeypatch, *args)
    assert rc == 0 and not CITATIONS.search(out + err), CITATIONS.search(out + err)


def test_output_strings_of_the_planner_cite_no_files_the_user_lacks():
    files = sorted((ROOT / "kvplan" / "plan").glob("*.py")) + [ROOT / "kvplan" / "report" / f"{n}.py" for n in
                                                               ("estimate_view", "capacity_view", "catalog_view")]
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                      and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                if (
                    "public_source" in path.read_text()
                    and "reference set" in node.value
                    and path.name == "catalog_view.py"
                ):
                    continue  # the pattern that removes such citations
                assert not CITATIONS.search(node.value), (path.name, node.value)


def test_the_headline_command_says_what_to_do(capsys, monkeypatch):
    """`estimate --concurrency 8 --gpu rtx-4090` does not fit: the concurrency asked about is the
    target, so the answer carries the ranked fixes and a `vllm serve` line that serves it, without
    --target-concurrency (issue 28)."""
    rc, out, _ = run_cli(
        capsys,
        monkeypatch,
        "estimate",
        "--model",
        "llama-2-7b",
        "--ctx",
        "4096",
        "--concurrency",
        "8",
        "--gpu",
        "rtx-4090",
        "--json",
    )
    data = json.loads(out)
    assert rc == 0 and data["fits"] is False
    assert data["vllm_fixes"] and any(f["enough"] for f in data["vllm_fixes"])
    assert data["recommended_command"].startswith("vllm serve meta-llama/Llama-2-7b-hf")
    assert "max concurrency" in data["recommendation"]
    assert not any("GQA" in f["fix"] for f in data["vllm_fixes"])


# --- 8. the answer's face: GPUs that fit without --gpu, the serve line with one, 80 columns ---------------
def test_without_a_gpu_the_answer_ends_with_the_catalog_gpus_that_fit(capsys, monkeypatch):
    """Llama-2-7B, 8 x 4,096 tokens (16 GiB of KV): on an H100 it fits at TP 1 (as `--gpu h100` says), and
    the JSON row agrees with that plan's largest concurrency; a 24 GiB card needs TP 2 (12.6 GiB of weights)."""
    ask = ("estimate", "--model", "llama-2-7b", "--ctx", "4096", "--concurrency", "8")
    rc, out, _ = run_cli(capsys, monkeypatch, *ask, "--json")
    rows = {r["gpu"]: r for r in json.loads(out)["catalog_gpus"]}
    _, h100, _ = run_cli(capsys, monkeypatch, "estimate", "--model", "llama-2-7b", "--ctx", "4096", "--concurrency",
                         "8", "--gpu", "h100", "--json")
    assert rc == 0 and rows["h100-sxm-80gb"]["fits"] and rows["h100-sxm-80gb"]["tp"] == 1
    assert rows["h100-sxm-80gb"]["max_concurrency_at_ctx"] == json.loads(h100)["max_concurrency_at_ctx"]
    assert rows["rtx-4090"]["tp"] == 2 and rows["rtx-4090"]["fits"]
    assert "apple-m4-max" not in rows  # no CUDA memory figure: vLLM's budget cannot be planned
    rc, text, _ = run_cli(capsys, monkeypatch, *ask)
    assert "on the catalog's GPUs" in text and "h100-sxm-80gb" in text


def test_with_a_gpu_the_serve_line_is_always_printed(capsys, monkeypatch):
    rc, out, _ = run_cli(capsys, monkeypatch, "estimate", "--model", "llama-2-7b", "--ctx", "4096",
                         "--concurrency", "8", "--gpu", "h100")
    assert rc == 0
    line = next(ln for ln in out.splitlines() if ln.startswith("as asked: vllm serve"))
    assert "--max-model-len 4096" in line and "--tensor-parallel-size 1" in line


def test_the_tables_fit_80_columns(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as exit_info:
        main(["estimate", "--model", "llama-2-7b", "--ctx", "4096", "--concurrency", "8", "--gpu", "rtx-4090"])
    rc, out = exit_info.value.code, capsys.readouterr().out
    table_lines = [ln for ln in out.splitlines() if ln[:1] in "┏┃┡│└"]
    assert rc == 0 and table_lines and max(len(ln) for ln in table_lines) <= 80
