"""`--target` URLs: checked before any client reads them (an HTTP library's own refusal of a bad
URL once escaped as an internal error, exit 70)."""
from __future__ import annotations

import pytest

from kvplan.errors import KvplanError
from kvplan.stress.targets.target_url import public_url


def test_public_url_keeps_ipv6_brackets_and_drops_credentials() -> None:
    assert public_url("http://[::1]:8000/v1/") == "http://[::1]:8000"
    assert public_url("http://user:secret@127.0.0.1:8000") == "http://127.0.0.1:8000"
    assert public_url("  https://example.com/prefix/v1 ") == "https://example.com/prefix"


@pytest.mark.parametrize("url, needle", [
    ("http://127.0.0.1:99999", "port 1-65535"),
    ("http://127.0.0.1:0", "port 1-65535"),
    ("http://127.0.0.1:８０００", "non-ASCII"),  # full-width digits
    ("http://127.0.0.1:8000/\x01", "control"),
    ("http://exa\x07mple.com", "control"),
    ("http://exa mple.com", "space"),
    ("http://[::1", "http(s) URL"),
    ("ftp://x", "http(s) URL"),
    ("http://", "http(s) URL"),
    ("http://user:hunter2@:80", "http(s) URL"),
])
def test_a_bad_target_is_one_line(url: str, needle: str) -> None:
    with pytest.raises(KvplanError, match=None) as info:
        public_url(url)
    text = str(info.value)
    assert needle in text and "\n" not in text and "hunter2" not in text


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999", "http://127.0.0.1:8000/\x01"])
def test_stress_refuses_it_before_reading_the_server(url: str, tmp_path, capsys) -> None:
    from kvplan.cli import main

    with pytest.raises(SystemExit) as info:
        main(["stress", "-s", "ci-smoke", "--target", url, "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1 and err.startswith("kvplan: error: --target")
    assert not (tmp_path / "out").exists()
