"""Numbers from the command line are ranged before any arithmetic: the issue-29 examples, each one
line and exit 2, quickly, where they once took tracebacks, tens of GB or an hour."""
from __future__ import annotations

from pathlib import Path

import pytest

from kvplan.cli import main

HUGE = "1" + "0" * 309  # past a float
CASES = [
    (["predict", "--model", "llama-3.1-8b-instruct", "--gpu", "h100", "--num-prompts", "2147483648"], "--num-prompts"),
    (["predict", "--model", "llama-3.1-8b-instruct", "--gpu", "h100", "--request-rate", "5e-324"], "--request-rate"),
    (["predict", "--model", "llama-3.1-8b-instruct", "--gpu", "h100", "--request-rate", "nan"], "--request-rate"),
    (
        ["predict", "--model", "llama-3.1-8b-instruct", "--gpu", "h100", "--request-rate", "5", "--burstiness", "inf"],
        "--burstiness",
    ),
    (
        [
            "predict",
            "--model",
            "llama-3.1-8b-instruct",
            "--gpu",
            "h100",
            "--request-rate",
            "5",
            "--burstiness",
            "5e-324",
        ],
        "--burstiness",
    ),
    (["predict", "--model", "llama-3.1-8b-instruct", "--gpu", "h100", "--seed", "-1"], "--seed"),
    (
        [
            "plan",
            "--model",
            "llama-3.1-8b-instruct",
            "--request-rate",
            "5e-324",
            "--slo-ttft-ms",
            "100",
            "--slo-tpot-ms",
            "50",
        ],
        "--request-rate",
    ),
    (["estimate", "--model", "llama-2-7b", "--block-size", HUGE], "--block-size"),
    (["estimate", "--model", "llama-2-7b", "--max-model-len", HUGE], "--max-model-len"),
    (
        ["estimate", "--model", "llama-2-7b", "--gpu", "h100", "--kv-cache-memory-bytes", str(10**18)],
        "--kv-cache-memory-bytes",
    ),
    (["estimate", "--model", "llama-2-7b", "--gpu", ""], "GPU"),
    (["estimate", "--model", "a" * 300 + "/x"], "no config.json"),
    (
        ["estimate", "--model", "qwen3-vl-8b-instruct", "--gpu", "h100", "--limit-mm-per-prompt", '{"image": 1e400}'],
        "--limit-mm-per-prompt",
    ),
    (
        ["estimate", "--model", "qwen3-vl-8b-instruct", "--gpu", "h100", "--limit-mm-per-prompt", "[" * 5000],
        "--limit-mm-per-prompt",
    ),
    (["stress", "--scenario", "a" * 300], "no such scenario"),
    (["stress", "--scenario", "ci-smoke", "--target", "http://[::1"], "--target"),
    (["stress", "--scenario", "ci-smoke", "--timeout-s", "nan"], "--timeout-s"),
    (["stress", "--scenario", "ci-smoke", "--timeout-s", "-1"], "--timeout-s"),
    (["stress", "--scenario", "ci-smoke", "--api", "xyz"], "--api"),
    (["stress", "--scenario", "ci-smoke", "--target", ""], "--target"),
    (["stress", "--scenario", "ci-smoke", "--out", ""], "--out"),
]


@pytest.mark.timeout(120)  # bounded: a huge number must not make kvplan work for long before refusing it
@pytest.mark.parametrize("args, names", CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_out_of_range_numbers_are_one_line(capsys, args: list[str], names: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(args)
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2, err
    assert len(err.splitlines()) == 1 and names in err and "Traceback" not in err


def test_running_out_of_memory_is_one_line_and_exit_2(capsys, monkeypatch) -> None:
    """A MemoryError (a run bigger than the process may take) is the size asked for, not a bug."""
    import kvplan.plan.estimate as estimate_module

    def hungry(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(estimate_module, "estimate", hungry)
    with pytest.raises(SystemExit) as info:
        main(["estimate", "--model", "llama-2-7b"])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and err.startswith("kvplan: error: out of memory") and "\n" not in err


def test_a_bug_is_one_line_with_its_own_exit_code(capsys, monkeypatch) -> None:
    """Whatever slipped through: no traceback without --debug, and not 1 (a regression) or 2 (bad input)."""
    import kvplan.plan.estimate as estimate_module

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(estimate_module, "estimate", broken)
    with pytest.raises(SystemExit) as info:
        main(["estimate", "--model", "llama-2-7b"])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 70 and err.startswith("kvplan: internal error: ZeroDivisionError: a bug")
    with pytest.raises(ZeroDivisionError):
        main(["estimate", "--model", "llama-2-7b", "--debug"])


def _big_int_files(tmp: Path) -> list[tuple[list[str], str]]:
    """A 5,000-digit integer (past Python's 4,300-digit conversion limit) in each kind of file kvplan reads."""
    import json
    import shutil

    digits = "9" * 5000
    model = tmp / "model"
    model.mkdir()
    config = json.loads((Path(__file__).resolve().parents[1] / "data" / "aiconfigurator" / "model_configs"
                         / "meta-llama--Meta-Llama-3.1-8B_config.json").read_text())
    (model / "config.json").write_text(
        json.dumps(config).replace('"num_hidden_layers": 32', f'"num_hidden_layers": {digits}')
    )
    (tmp / "big.yaml").write_text(f"name: big\nnum_requests: {digits}\n")
    result = tmp / "result.json"
    shutil.copy(Path(__file__).resolve().parents[2] / "kvplan" / "data" / "baselines" / "ci-smoke.json", result)
    result.write_text(result.read_text().replace('"schema_version"', f'"x": {digits}, "schema_version"', 1))
    return [
        (["estimate", "--model", str(model)], "4,300 digits"),
        (["stress", "--scenario", str(tmp / "big.yaml")], "4,300 digits"),
        (["report", str(result), "-o", str(tmp / "r.html")], "4,300 digits"),
        (["gate", "--baseline", str(result), "--result", str(result)], "4,300 digits"),
    ]


def test_a_number_past_4300_digits_in_a_file_is_one_line(capsys, tmp_path: Path) -> None:
    for args, words in _big_int_files(tmp_path):
        with pytest.raises(SystemExit) as info:
            main(args)
        err = capsys.readouterr().err.strip()
        assert info.value.code == 2 and words in err and len(err.splitlines()) == 1, (args, err)


def test_a_list_as_a_yaml_key_is_one_line(capsys, tmp_path: Path) -> None:
    """`? [a, b]` makes a list a mapping key: PyYAML raised TypeError (unhashable) inside the loader."""
    bad = tmp_path / "unhashable.yaml"
    bad.write_text("name: x\n? [a, b]\n: 1\n")
    with pytest.raises(SystemExit) as info:
        main(["stress", "--scenario", str(bad)])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and "as a mapping key" in err and len(err.splitlines()) == 1
