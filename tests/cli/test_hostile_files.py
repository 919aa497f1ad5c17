"""Hostile files and paths: devices are never replaced, names never escape their folder, alias
bombs and deep JSON are refused cheaply, and impossible sizes are errors, not endless runs."""
from __future__ import annotations

import os
import stat
import tracemalloc
from pathlib import Path

import pytest
import yaml

from kvplan.cli import main
from kvplan.errors import KvplanError
from kvplan.files import child_path, write_text_atomic
from kvplan.stress.scenario_loader import load_scenario

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "kvplan" / "data" / "baselines" / "ci-smoke.json"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def _mknod(path: Path, major: int, minor: int) -> Path:
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    return path


@needs_root
def test_a_full_device_survives_and_the_command_exits_2(tmp_path: Path, capsys) -> None:
    full = _mknod(tmp_path / "full", 1, 7)  # the same device as /dev/full
    rc, _, err = _cli(capsys, "report", str(BASELINE), "-o", str(full))
    assert rc == 2 and "cannot write" in err and len(err.strip().splitlines()) == 1
    assert stat.S_ISCHR(full.stat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full"]  # no temp file left behind


@needs_root
def test_a_null_device_is_written_to_not_replaced(tmp_path: Path, capsys) -> None:
    null = _mknod(tmp_path / "null", 1, 3)
    rc, _, _ = _cli(capsys, "gate", "--baseline", str(BASELINE), "--result", str(BASELINE), "--junit", str(null))
    assert rc == 0 and stat.S_ISCHR(null.stat().st_mode)


def test_fifo_target_is_written_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so the writer does not block
    try:
        write_text_atomic(fifo, "hello")
        assert os.read(fd, 100) == b"hello" and stat.S_ISFIFO(fifo.stat().st_mode)
    finally:
        os.close(fd)


def test_child_paths_stay_under_their_root(tmp_path: Path) -> None:
    assert child_path(tmp_path, "ci-smoke", "x.yaml") == tmp_path / "ci-smoke" / "x.yaml"
    for bad in ("../x", "/abs/x", "a/../../x"):
        with pytest.raises(KvplanError, match="outside"):
            child_path(tmp_path, bad)


def _smoke(tmp_path: Path, **changes) -> Path:
    data = load_scenario("ci-smoke").to_dict()
    for dotted, value in changes.items():
        holder = data
        *parents, last = dotted.split("__")
        for key in parents:
            holder = holder[key]
        holder[last] = value
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("changes,needle", [
    ({"arrival__ramp_s": float("inf")}, "ramp_s"),
    ({"num_requests": 2**64}, "num_requests"),
    ({"arrival": {"type": "poisson", "rate_per_s": 1e-300}, "num_requests": 8}, "rate_per_s"),
    ({"model": {"name": "tiny-llama", "overrides": {"head_dim": 0}}}, "head_dim"),
    ({"model": {"name": "tiny-llama", "overrides": {"head_dim": 1.5}}}, "head_dim"),
    ({"model": {"name": "tiny-llama", "overrides": {"vocab_size": -5}}}, "vocab_size"),
    ({"model": {"name": "tiny-llama", "overrides": {"not_a_key": 1}}}, "not_a_key"),
    ({"model": {"name": "tiny-llama", "overrides": {"rope_scaling": {"a": [1] * 10}}}}, "rope_scaling"),
])
def test_impossible_scenarios_are_one_line_errors(tmp_path: Path, capsys, changes: dict, needle: str) -> None:
    rc, _, err = _cli(capsys, "stress", "-s", str(_smoke(tmp_path, **changes)), "--out", str(tmp_path / "o"))
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def _bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("where", ["description", "model_overrides"])
def test_a_small_alias_bomb_is_refused_cheaply(tmp_path: Path, where: str) -> None:
    bomb = _bomb()
    assert len(bomb) < 1024  # 9^9 = 387 million strings once expanded
    body = yaml.safe_dump(load_scenario("ci-smoke").to_dict())
    text = bomb + body.replace("description:", "description: *a8\nold_description:", 1) if where == "description" else \
        bomb + body.replace("model: tiny-llama", "model: {name: tiny-llama, overrides: {rope_scaling: *a8}}", 1)
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    tracemalloc.start()
    try:
        with pytest.raises(KvplanError, match="aliases|expanded"):
            load_scenario(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100 * 2**20


def test_deep_yaml_and_deep_json_are_refused(tmp_path: Path, capsys) -> None:
    deep_yaml = tmp_path / "deep.yaml"
    deep_yaml.write_text("name: x\ndescription: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(KvplanError, match="deeper"):
        load_scenario(deep_yaml)
    deep_json = tmp_path / "deep.json"
    deep_json.write_text('{"schema_version": 1, "scenario": ' + "[" * 100_000 + "]" * 100_000 + "}")
    for args in (
        ["report", str(deep_json), "-o", str(tmp_path / "r.html")],
        ["gate", "-r", str(deep_json), "-b", str(BASELINE)],
        ["baseline", "update", str(deep_json), "--dir", str(tmp_path / "b")],
    ):
        rc, _, err = _cli(capsys, *args)
        assert rc == 2 and "nested too deeply" in err, args


def test_a_fifo_or_device_as_input_is_refused_without_reading(tmp_path: Path, capsys) -> None:
    fifo = tmp_path / "s.yaml"
    os.mkfifo(fifo)  # opening it for reading would block forever
    rc, _, err = _cli(capsys, "stress", "-s", str(fifo))
    assert rc == 2 and "not a regular file" in err
    rc, _, err = _cli(capsys, "report", "/dev/zero", "-o", str(tmp_path / "r.html"))
    assert rc == 2 and "not a regular file" in err


@pytest.mark.parametrize("catalog, needle", [
    ("gpus: {}\n", "must be a list of GPUs"),
    ("- name: x\n  memory_marketed_gb: lots\n", "memory_marketed_gb"),
    ("- name: x\n  memory_marketed_gb: 24\n  memory_bandwidth_gbps: .nan\n", "finite"),
    ("- name: x\n  memory_marketed_gb: 24\n  cuda_total_bytes: -5\n", "cuda_total_bytes"),
    ("- memory_marketed_gb: 24\n", "name"),
    ("- h100\n", "GPU #1"),
])
def test_a_user_gpu_catalog_is_checked_like_any_input(tmp_path, catalog: str, needle: str) -> None:
    """$KVPLAN_DATA points kvplan at a user's copy of its data: a bad GPU catalog there is one line
    naming the file, the GPU and the field, exit 2, not a traceback."""
    import os
    import subprocess
    import sys

    (tmp_path / "gpus.yaml").write_text(catalog)
    env = {**os.environ, "KVPLAN_DATA": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "kvplan", "gpus"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvplan: error:") and "gpus.yaml" in lines[0] and needle in lines[0]


@pytest.mark.parametrize("line, needle", [("name: [1, 2]", "'name' must be a non-empty string"),
                                          ("aliases: 7", "'aliases' must be a list of names"),
                                          ("hf_id: {a: 1}", "'hf_id' must be a non-empty string")])
def test_a_user_model_profile_header_is_checked(tmp_path, line: str, needle: str) -> None:
    """A profile in $KVPLAN_DATA whose own keys have the wrong type: one line naming the file and
    the key, exit 2 (a list used to be printed as the model's name)."""
    import os
    import shutil
    import subprocess
    import sys

    from kvplan.spec.catalog_files import bundled_dir, profiles_dir

    (tmp_path / "models").mkdir()
    shutil.copy(bundled_dir() / "gpus.yaml", tmp_path / "gpus.yaml")
    text = (profiles_dir() / "llama-2-7b.yaml").read_text()
    key = line.split(":")[0]
    lines = [ln for ln in text.splitlines() if not ln.startswith(f"{key}:")]
    (tmp_path / "models" / "mine.yaml").write_text("\n".join([line, *lines]) + "\n")
    env = {**os.environ, "KVPLAN_DATA": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "kvplan", "estimate", "--model", "mine", "--ctx", "100", "--concurrency", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2, (done.stdout[-500:], done.stderr)
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and "mine.yaml" in err[0] and needle in err[0]
