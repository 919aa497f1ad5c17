"""`--model owner/name[@revision]`: bundled profiles by hf_id, the local Hugging Face cache, the Hub
(mocked: these tests never touch the network), and the one-line error listing what was tried.

The fake cache has huggingface_hub's real layout: `models--owner--name/refs/<ref>` holding a commit
hash, `blobs/<sha>` and `snapshots/<hash>/<file>` linking to its blob.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hf_cache import FAKE_ID, MAIN_SHA, OTHER_SHA, QWEN3_8B, QWEN3_8B_KV_BYTES_PER_TOKEN, ROOT, put, safetensors  # noqa: F401

from kvplan.cli import main
from kvplan.errors import KvplanError, UnknownNameError
from kvplan.spec import hub
from kvplan.spec.profiles import load_model, model_config, model_profile


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty fake HF cache that huggingface_hub's lookups (and kvplan's) use; offline."""
    d = tmp_path / "hf-cache"
    d.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(d))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "_FETCHED", {})
    return d


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


# --- repo-id syntax and the cache folder -------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("meta-llama/Llama-2-7b-hf", ("meta-llama/Llama-2-7b-hf", None)),
    ("Qwen/Qwen3-8B@main", ("Qwen/Qwen3-8B", "main")),
    ("org/model@refs/pr/3", ("org/model", "refs/pr/3")),
    ("llama-2-7b", None), ("a/b/c", None), ("./x", None), ("../x/y", None), ("/abs/path", None),
    ("~/models", None), ("dir/config.json", None), ("org/name@", None), ("org/na--me", None),
])
def test_split_repo_id(text, expected):
    assert hub.split_repo_id(text) == expected


def test_cache_dir_follows_the_environment_at_call_time(monkeypatch, tmp_path):
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    assert hub.hub_cache_dir() == Path.home() / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub.hub_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub.hub_cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    assert hub.hub_cache_dir() == tmp_path / "cache"


# --- 2a: a bundled profile by its hf_id ----------------------------------------------------------------
@pytest.mark.parametrize(
    "text", ["meta-llama/Llama-2-7b-hf", "META-LLAMA/llama-2-7B-HF", "meta-llama/Llama-2-7b-hf@main"]
)
def test_hf_id_of_a_bundled_profile_gives_that_profile(cache, text):
    spec = load_model(text)
    assert spec == load_model("llama-2-7b") and spec.name == "llama-2-7b"
    assert spec.hf_id == "meta-llama/Llama-2-7b-hf"
    assert model_config(text) == model_config("llama-2-7b")
    assert model_profile(text)["name"] == "llama-2-7b"


def test_hf_id_with_overrides(cache):
    spec = load_model("meta-llama/Llama-3.1-8B-Instruct", {"num_hidden_layers": 2})
    assert spec.num_layers == 2 and spec.hf_id == "meta-llama/Llama-3.1-8B-Instruct"


# --- 2b: the local Hugging Face cache ------------------------------------------------------------------
def test_cached_model_without_weights_info(cache):
    put(cache, FAKE_ID, MAIN_SHA, {"config.json": QWEN3_8B.read_text()})
    spec = load_model(FAKE_ID)
    assert spec.name == FAKE_ID and spec.hf_id == FAKE_ID
    assert (spec.num_layers, spec.num_kv_heads, spec.head_dim) == (36, 8, 128)
    assert spec.checkpoint_weights_bytes is None
    assert spec.weights_bytes == load_model("qwen3-8b").weights_bytes  # computed from the parameter count
    assert spec.source.endswith(f"snapshots/{MAIN_SHA}/config.json")
    assert model_config(FAKE_ID) == json.loads(QWEN3_8B.read_text())


def test_cached_model_weight_bytes_from_the_index(cache):
    index = {"metadata": {"total_size": 16_381_470_720}, "weight_map": {"w": "model-00001-of-00002.safetensors"}}
    put(cache, FAKE_ID, MAIN_SHA, {"config.json": QWEN3_8B.read_text(), hub.INDEX_FILE: json.dumps(index)})
    assert load_model(FAKE_ID).weights_bytes == 16_381_470_720


def test_cached_model_weight_bytes_from_safetensors_headers(cache):
    put(cache, FAKE_ID, MAIN_SHA, {"config.json": QWEN3_8B.read_text(), "model.safetensors": safetensors(4096)})
    assert load_model(FAKE_ID).weights_bytes == 4096


def test_some_shards_without_the_index_are_not_counted(cache):
    put(cache, FAKE_ID, MAIN_SHA, {"config.json": QWEN3_8B.read_text(),
                                   "model-00001-of-00002.safetensors": safetensors(4096)})
    assert load_model(FAKE_ID).checkpoint_weights_bytes is None


def test_cached_model_by_revision(cache):
    put(cache, FAKE_ID, MAIN_SHA, {"config.json": QWEN3_8B.read_text()})
    smaller = {**json.loads(QWEN3_8B.read_text()), "num_hidden_layers": 4}
    put(cache, FAKE_ID, OTHER_SHA, {"config.json": json.dumps(smaller)}, refs=("v2", "refs/pr/1"))
    assert load_model(FAKE_ID).num_layers == 36
    assert load_model(f"{FAKE_ID}@main").num_layers == 36
    for rev in ("v2", "refs/pr/1", OTHER_SHA):
        spec = load_model(f"{FAKE_ID}@{rev}")
        assert spec.num_layers == 4 and spec.name == f"{FAKE_ID}@{rev}" and spec.hf_id == FAKE_ID
        assert model_config(f"{FAKE_ID}@{rev}")["num_hidden_layers"] == 4
    with pytest.raises(UnknownNameError, match="revision v9"):
        load_model(f"{FAKE_ID}@v9")


def test_cached_model_in_any_case(cache):
    put(cache, FAKE_ID, MAIN_SHA, {"config.json": QWEN3_8B.read_text()})
    spec = load_model(FAKE_ID.upper())
    assert spec.hf_id == FAKE_ID and spec.num_layers == 36


def test_cache_found_through_hf_home(cache, monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    put(tmp_path / "home" / "hub", FAKE_ID, MAIN_SHA, {"config.json": QWEN3_8B.read_text()})
    assert load_model(FAKE_ID).num_layers == 36


def test_overrides_over_a_cached_model(cache):
    put(cache, FAKE_ID, MAIN_SHA, {"config.json": QWEN3_8B.read_text()})
    spec = load_model(FAKE_ID, {"num_key_value_heads": 4})
    assert spec.num_kv_heads == 4 and spec.hf_id == FAKE_ID


def test_an_existing_path_wins_over_a_repo_id(cache, tmp_path, monkeypatch):
    put(cache, FAKE_ID, MAIN_SHA, {"config.json": QWEN3_8B.read_text()})
    local = tmp_path / "work" / FAKE_ID
    local.mkdir(parents=True)
    (local / "config.json").write_text(json.dumps({**json.loads(QWEN3_8B.read_text()), "num_hidden_layers": 3}))
    monkeypatch.chdir(tmp_path / "work")
    spec = load_model(FAKE_ID)
    assert spec.num_layers == 3 and spec.hf_id is None
    assert model_config(FAKE_ID)["num_hidden_layers"] == 3


# --- nowhere: one line listing what was tried ------------------------------------------------------------
def test_offline_and_not_cached_lists_what_was_tried(cache):
    with pytest.raises(UnknownNameError) as err:
        load_model("meta-llama/Foo")
    assert str(err.value) == (
        f"meta-llama/Foo: not a bundled profile (no profile has hf_id meta-llama/Foo), not in the Hugging Face "
        f"cache ({cache}), not fetched (HF_HUB_OFFLINE=1), not a local path")
    with pytest.raises(UnknownNameError, match="not fetched"):
        model_config("meta-llama/Foo")


def test_unknown_plain_name_keeps_its_message(cache):
    with pytest.raises(UnknownNameError, match=r"unknown model 'llama-2-7'; did you mean.*llama-2-7b"):
        load_model("llama-2-7")


def test_cli_error_is_one_line(cache, capsys):
    rc, out, err = run_cli(capsys, "estimate", "--model", "meta-llama/Foo", "--json")
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "not in the Hugging Face cache" in err and "HF_HUB_OFFLINE=1" in err


# --- 2c: the Hub (huggingface_hub's download functions replaced: no network) ------------------------------
@pytest.fixture
def online(cache, monkeypatch):
    """Not offline; `hf_hub_download` serves files from `remote` (repo id -> {file: text}) into the cache."""
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "hub_unreachable", lambda: None)  # the faked Hub is reachable
    remote: dict[str, dict[str, str]] = {}
    calls: list[tuple[str, str]] = []

    def fake_download(repo_id, filename, *, revision=None, cache_dir=None, **_):
        from huggingface_hub import errors

        calls.append((repo_id, filename))
        if filename not in remote.get(repo_id, {}):
            raise errors.RemoteEntryNotFoundError("404 Client Error", response=_response(404))
        snapshot = put(Path(cache_dir), repo_id, MAIN_SHA, {filename: remote[repo_id][filename]})
        return str(snapshot / filename)

    def no_metadata(repo_id, **_):
        from huggingface_hub import errors

        raise errors.NotASafetensorsRepoError(f"{repo_id} has no safetensors")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", no_metadata)
    return remote, calls


def _response(status: int):
    import httpx

    return httpx.Response(status, request=httpx.Request("GET", "https://huggingface.co/x/y/resolve/main/config.json"))


def test_fetched_config_and_index_land_in_the_cache(online, cache, monkeypatch):
    remote, calls = online
    remote[FAKE_ID] = {
        "config.json": QWEN3_8B.read_text(),
        hub.INDEX_FILE: json.dumps({"metadata": {"total_size": 123456}}),
    }
    spec = load_model(FAKE_ID)
    assert spec.num_layers == 36 and spec.weights_bytes == 123456 and spec.hf_id == FAKE_ID
    assert calls == [(FAKE_ID, "config.json"), (FAKE_ID, hub.INDEX_FILE)]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the next run reads the cache alone
    monkeypatch.setattr(hub, "_FETCHED", {})
    assert load_model(FAKE_ID).weights_bytes == 123456 and len(calls) == 2


def test_fetched_without_index_or_safetensors(online):
    remote, _ = online
    remote[FAKE_ID] = {"config.json": QWEN3_8B.read_text()}
    assert load_model(FAKE_ID).checkpoint_weights_bytes is None


@pytest.mark.parametrize("error,status,expected", [
    ("GatedRepoError", 401, "gated repo, HTTP 401: set HF_TOKEN to a token whose account has accepted the licence at "
                            "https://huggingface.co/meta-llama/Gated"),
    ("RepositoryNotFoundError", 401, "HTTP 401: no such repo, or a private or gated one; set HF_TOKEN"),
    ("RevisionNotFoundError", 404, "no revision"),
])
def test_hub_refusals_are_one_line(online, monkeypatch, capsys, error, status, expected):
    import huggingface_hub
    from huggingface_hub import errors

    def refuse(*_, **__):
        raise getattr(errors, error)("Client Error.\n\nmany lines of advice", response=_response(status))

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)
    with pytest.raises(KvplanError) as err:
        load_model("meta-llama/Gated")
    assert expected in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("meta-llama/Gated: not a bundled profile")
    rc, _, out_err = run_cli(capsys, "estimate", "--model", "meta-llama/Gated")
    assert rc == 2 and expected in out_err and len(out_err.strip().splitlines()) == 1


# --- the CLI ------------------------------------------------------------------------------------------
def test_cli_estimate_with_a_cached_repo_id(cache, capsys):
    put(cache, FAKE_ID, MAIN_SHA, {"config.json": QWEN3_8B.read_text(),
                                   hub.INDEX_FILE: json.dumps({"metadata": {"total_size": 16_381_470_720}})})
    rc, out, _ = run_cli(capsys, "estimate", "--model", FAKE_ID, "--json")
    assert rc == 0
    data = json.loads(out)
    assert data["kv_bytes_per_token"] == QWEN3_8B_KV_BYTES_PER_TOKEN
    assert data["model"] == FAKE_ID and data["hf_id"] == FAKE_ID and data["weights_bytes"] == 16_381_470_720
    rc, out, _ = run_cli(capsys, "estimate", "--model", "qwen3-8b", "--json")
    assert json.loads(out)["kv_bytes_per_token"] == QWEN3_8B_KV_BYTES_PER_TOKEN


def test_cli_estimate_with_a_bundled_hf_id(cache, capsys):
    rc, out, _ = run_cli(capsys, "estimate", "--model", "meta-llama/Llama-2-7b-hf", "--json")
    assert rc == 0 and json.loads(out)["kv_bytes_per_token"] == 524_288


_CHILD = """
import json, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers"):
            print("BLOCKED " + name, file=sys.stderr)
            raise ImportError("blocked " + name)
sys.meta_path.insert(0, Block())
from kvplan.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "transformers", "huggingface_hub"})
print("LOADED " + json.dumps(heavy), file=sys.stderr)
sys.exit(code)
"""


def _child(model: str, cache: Path) -> tuple[int, str, list[str]]:
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _CHILD, "estimate", "--model", model, "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert "BLOCKED" not in proc.stderr, proc.stderr
    loaded = [line for line in proc.stderr.splitlines() if line.startswith("LOADED ")]
    assert loaded, proc.stderr
    return proc.returncode, proc.stdout, json.loads(loaded[-1][len("LOADED "):])


def test_estimate_by_hf_id_imports_neither_torch_nor_huggingface_hub(cache):
    rc, out, loaded = _child("meta-llama/Llama-2-7b-hf", cache)
    assert rc == 0 and json.loads(out)["kv_bytes_per_token"] == 524_288
    assert loaded == []


def test_estimate_from_the_cache_imports_no_torch(cache):
    put(cache, FAKE_ID, MAIN_SHA, {"config.json": QWEN3_8B.read_text()})
    rc, out, loaded = _child(FAKE_ID, cache)
    assert rc == 0 and json.loads(out)["kv_bytes_per_token"] == QWEN3_8B_KV_BYTES_PER_TOKEN
    assert loaded == ["huggingface_hub"]


def test_profiles_show_a_cached_repo_id(cache, capsys) -> None:
    put(cache, FAKE_ID, MAIN_SHA, {"config.json": QWEN3_8B.read_text()})
    rc, out, err = run_cli(capsys, "profiles", "show", FAKE_ID, "--json")
    assert rc == 0, err
    shown = json.loads(out)
    assert shown["hf_id"] == FAKE_ID and shown["config"]["num_hidden_layers"] == 36
    rc, out, err = run_cli(capsys, "profiles", "show", FAKE_ID)
    assert rc == 0 and FAKE_ID in out, err


def test_an_unreachable_hub_is_not_retried(monkeypatch, tmp_path) -> None:
    """Offline without HF_HUB_OFFLINE: one TCP probe of the Hub's host says so, and huggingface_hub's
    download (whose retries took ~25 s on a machine without network) is never called."""
    import socket

    import huggingface_hub

    from kvplan.spec import hub

    with socket.socket() as s:  # a port nothing listens on: connection refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))

    def never(*args, **kwargs):
        raise AssertionError("huggingface_hub was asked although the Hub cannot be reached")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", never)
    with pytest.raises(hub.HubModelNotFoundError, match=f"cannot reach the Hugging Face Hub: .*127.0.0.1:{port}"):
        hub.resolve_repo("some-org/nothing-here", "some-org/nothing-here", None)
