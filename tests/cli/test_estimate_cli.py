"""`kvplan estimate` end to end: JSON contract, llama-2-7b on 24 GiB, bad input, import weight."""
import json
import subprocess
import sys

import pytest

from kvplan.cli import main

GIB = 2**30


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_json_contract(capsys):
    rc, out, _ = run_cli(capsys, "estimate", "--model", "llama-2-7b", "--ctx", "4096", "--concurrency", "8",
                         "--kv-cache-dtype", "float16", "--json")
    assert rc == 0
    data = json.loads(out)
    for key in ("model", "ctx", "concurrency", "kv_cache_dtype", "block_size", "kv_bytes_per_token",
                "kv_bytes_per_block", "kv_bytes_per_request", "kv_bytes_total", "weights_bytes"):
        assert key in data, key
    assert data["kv_bytes_per_token"] == 524_288 and isinstance(data["kv_bytes_total"], int)
    assert data["kv_bytes_total"] == 16 * GIB
    assert data["kv_bytes_per_block"] == 16 * 524_288
    assert data["weights_bytes"] == 6_738_415_616 * 2


def test_llama_2_7b_example_on_24_gib(capsys):
    rc, out, _ = run_cli(capsys, "estimate", "--model", "llama-2-7b", "--ctx", "4096", "--concurrency", "8",
                         "--gpu-memory-gib", "24", "--json")
    data = json.loads(out)
    assert rc == 0 and data["fits"] is False
    assert 1 <= data["max_concurrency_at_ctx"] < 8
    assert data["max_ctx_at_concurrency"] < 4096


def test_table_output_shows_window_math(capsys):
    rc, out, _ = run_cli(capsys, "estimate", "--model", "gemma-3-27b", "--ctx", "8192", "--concurrency", "2")
    assert rc == 0
    assert "52 sliding layers (window 1,024)" in out and "10 full-attention layers" in out
    assert "if every layer were" in out


def test_ctx_beyond_max_position_is_an_error(capsys):
    """A context the model was not built for is a user mistake (vLLM refuses it too), not a plan."""
    rc, out, err = run_cli(capsys, "estimate", "--model", "llama-2-7b", "--ctx", "8192", "--json")
    assert rc == 2 and out == ""
    assert "--ctx 8192" in err and "4096" in err and len(err.strip().splitlines()) == 1


BAD = [
    (["estimate", "--model", "llama-2-7", "--ctx", "4096"], "llama-2-7b"),  # closest names
    (["estimate", "--model", "no-such-model"], "unknown model"),
    (["estimate", "--model", "llama-2-7b", "--ctx", "0"], "--ctx"),
    (["estimate", "--model", "llama-2-7b", "--ctx", "-5"], "--ctx"),
    (["estimate", "--model", "llama-2-7b", "--ctx", "abc"], "--ctx"),
    (["estimate", "--model", "llama-2-7b", "--concurrency", "0"], "--concurrency"),
    (["estimate", "--model", "llama-2-7b", "--concurrency", "-1"], "--concurrency"),
    (["estimate", "--model", "llama-2-7b", "--block-size", "0"], "--block-size"),
    (["estimate", "--model", "llama-2-7b", "--block-size", "-16"], "--block-size"),
    (["estimate", "--model", "llama-2-7b", "--tp", "3"], "--tp 3"),
    (["estimate", "--model", "llama-3-8b", "--tp", "0"], "--tp"),
    (["estimate", "--model", "llama-2-7b", "--pp", "0"], "--pp"),
    (["estimate", "--model", "llama-2-7b", "--pp", "64"], "--pp 64"),
    (["estimate", "--model", "llama-2-7b", "--kv-cache-dtype", "fp6"], "fp6"),
    (["estimate", "--model", "llama-2-7b", "--dtype", "float8"], "float8"),
    (["estimate", "--model", "llama-2-7b", "--gpu", "h1000"], "unknown GPU"),
    (["estimate", "--model", "llama-2-7b", "--gpu-memory-gib", "-24"], "gpu-memory-gib"),
    (["estimate", "--model", "llama-2-7b", "--gpu-memory-gib", "24", "--gpu", "h100"], "either"),
    (["estimate", "--model", "llama-2-7b", "--gpu-memory-utilization", "1.5", "--gpu-memory-gib", "24"], "utilization"),
    (["estimate", "--model", "llama-2-7b", "--prefix-tokens", "-1"], "prefix"),
    (["estimate", "--model", "llama-2-7b", "--ctx", "100", "--prefix-tokens", "200"], "prefix"),
    (["estimate", "--model", "llama-2-7b", "--max-model-len", "0"], "max-model-len"),
    (["estimate", "--model", "llama-2-7b", "--ctx", "4096", "--max-model-len", "1024"], "max-model-len"),
    (["estimate", "--ctx", "4096"], "--model"),
    (["estimate", "--model", "/nonexistent/dir"], "config.json"),
    (["estimate", "--model", "llama-2-7b", "--no-such-flag"], "no-such-flag"),
    (["frobnicate"], "frobnicate"),
    (["profiles", "show", "nope-model"], "unknown model"),
]


@pytest.mark.parametrize("args,needle", BAD, ids=[" ".join(a)[:60] for a, _ in BAD])
def test_bad_invocations_exit_2_with_one_line(capsys, args, needle):
    rc, out, err = run_cli(capsys, *args)
    assert rc == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert needle.lower() in lines[0].lower()


@pytest.mark.parametrize(
    "content,needle",
    [
        ("{not json", "not valid JSON"),
        ('{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10}', "num_hidden_layers"),
        ('{"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10}', "hidden_size"),
        ("[1, 2]", "JSON object"),
        (
            '{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, '
            '"num_key_value_heads": 3, "vocab_size": 10}',
            "num_key_value_heads",
        ),
    ],
)
def test_bad_config_json(capsys, tmp_path, content, needle):
    path = tmp_path / "config.json"
    path.write_text(content)
    rc, _, err = run_cli(capsys, "estimate", "--model", str(path))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and needle in err


def test_debug_shows_traceback():
    proc = subprocess.run([sys.executable, "-m", "kvplan", "estimate", "--model", "nope", "--debug"],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" in proc.stderr


@pytest.mark.parametrize(
    "args", [["--help"], ["estimate", "--model", "llama-2-7b", "--ctx", "4096", "--concurrency", "8", "--gpu", "h100"]]
)
def test_no_torch_or_transformers_imported(args):
    code = (
        f"import sys\nfrom kvplan.cli import main\ntry:\n    main({args!r})\nexcept SystemExit as e:\n    assert "
        "e.code == 0, e.code\n"
        "heavy = [m for m in ('torch', 'transformers', 'pandas', 'matplotlib') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stdout


def test_profiles_and_gpus_commands(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    rc, out, _ = run_cli(capsys, "gpus")
    assert rc == 0 and "h100-sxm-80gb" in out
    rc, out, _ = run_cli(capsys, "profiles")
    assert rc == 0 and "llama-2-7b" in out
    rc, out, _ = run_cli(capsys, "profiles", "show", "mistral-7b")
    assert rc == 0 and "4096" in out and "sliding" in out
