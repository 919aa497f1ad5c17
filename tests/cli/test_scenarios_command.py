"""`kvplan scenarios`: the list (table or --json) and `show NAME` (the YAML, or its resolved settings)."""
from __future__ import annotations

import json

import pytest
import yaml

from kvplan.cli import main
from kvplan.stress.scenario_loader import bundled_scenarios


def _run(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def test_list_as_json_names_every_bundled_scenario(capsys) -> None:
    code, out, _ = _run(capsys, "scenarios", "--json")
    assert code == 0 and [r["name"] for r in json.loads(out)] == list(bundled_scenarios())


def test_show_prints_the_yaml_that_stress_runs(capsys) -> None:
    code, out, _ = _run(capsys, "scenarios", "show", "mixed")
    assert code == 0 and yaml.safe_load(out)["name"] == "mixed"
    code, out, _ = _run(capsys, "scenarios", "show", "mixed", "--json")
    assert code == 0 and json.loads(out)["engine"]["block_size"] == 16


@pytest.mark.parametrize("args, words", [(("scenarios", "show"), "needs a NAME"), (("scenarios", "list"), "show NAME"),
                                         (("scenarios", "show", "no-such"), "no such scenario")])
def test_bad_arguments_are_one_line(capsys, args: tuple[str, ...], words: str) -> None:
    code, _, err = _run(capsys, *args)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1
