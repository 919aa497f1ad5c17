"""Adding a family with a new cache kind touches its family module, its cache-kind module and their
tests, nothing else (docs/architecture.md, "Worked example"). The two modules of that example are in
tests/data/new_family/ exactly as they would be dropped into kvplan/spec/families/ and
kvplan/spec/cache/; this test lends those two packages the folders (their `__path__`, read only, so
the source tree is not written) and asks estimate and predict about an `acme` config.json. Were a
cache kind's string matched anywhere in plan/, report/ or perf/, or a family listed by hand, the
new kind or family would be refused or mis-planned here."""
from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import kvplan.spec.cache as cache_pkg
import kvplan.spec.families as families_pkg
from kvplan.cli import main

DATA = Path(__file__).resolve().parents[1] / "data" / "new_family"
ADDED = ("kvplan.spec.cache.pooled", "kvplan.spec.families.acme")


def _forget() -> None:
    for name in ADDED:
        sys.modules.pop(name, None)
    for value in vars(families_pkg).values():  # the discovered-family tables
        if hasattr(value, "cache_clear"):
            value.cache_clear()


@pytest.fixture
def acme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr(cache_pkg, "__path__", [*cache_pkg.__path__, str(DATA / "cache")])
    monkeypatch.setattr(families_pkg, "__path__", [*families_pkg.__path__, str(DATA / "families")])
    _forget()
    model = tmp_path / "acme"
    model.mkdir()
    shutil.copy(DATA / "config.json", model / "config.json")
    yield model
    _forget()


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    assert info.value.code == 0, err
    return out


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    return json.loads(_run([*argv, "--json"], capsys))


def test_estimate_sums_the_new_kind_beside_full_attention(acme: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(["estimate", "--model", str(acme), "--ctx", "32768", "--gpu", "h100"], capsys)
    # by hand: full attention 2 (K, V) x 8 heads x 128 x 2 B = 4,096 B a token a layer, x 32 layers;
    # pooled 4,096 B an entry per 64 tokens = 64 B a token a layer, x 32 layers
    assert out["kv_bytes_per_token"] == 32 * 4096 + 32 * 64 == 133_120
    # a 32,768-token request: 32,768 x 131,072 B of full attention + 512 entries x 4,096 B x 32 layers
    assert out["kv_bytes_per_request_exact"] == 32_768 * 131_072 + 512 * 4096 * 32
    assert out["fits"] and out["vllm_serve"].startswith(f"vllm serve {acme} ")
    assert not [w for w in out["warnings"] if "not checked" in w]  # the family says it was checked by hand


def test_the_estimate_describes_the_new_kind(acme: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(["estimate", "--model", str(acme), "--ctx", "32768", "--gpu", "h100"], capsys)
    assert "32 pooled caches: one entry per 64 tokens, 512 at 32,768" in out  # 32,768 / 64 = 512


def test_predict_runs_and_names_the_kind_it_does_not_time(acme: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(["predict", "--model", str(acme), "--gpu", "h100", "--random-input-len", "1000",
                 "--random-output-len", "20", "--request-rate", "5", "--num-prompts", "20"], capsys)
    assert out["completed"] == 20
    assert out["step_cost_sources"]["cache_kinds"] == "PooledKeys: not timed"


def test_the_example_in_the_docs_is_these_modules() -> None:
    """Every line of the doc's worked example is a line of these modules: a change to one side
    alone fails here."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
    example = doc[doc.index("### Worked example"):]
    shown = [line.strip() for block in example.split("```python")[1:] for line in block.split("```")[0].splitlines()]
    modules = (DATA / "cache" / "pooled.py", DATA / "families" / "acme.py")
    code = {line.strip() for module in modules for line in module.read_text().splitlines()}
    assert len([line for line in shown if line]) >= 20
    assert [line for line in shown if line and line not in code] == []
