"""specdec.listen: loopback addresses pass silently; any other listening
address gets one warning naming who can reach it and what it exposes."""

import pytest

from specdec.listen import is_loopback, warn_if_exposed


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "LOCALHOST"])
def test_loopback_addresses_are_not_warned_about(host):
    said = []
    assert is_loopback(host) and warn_if_exposed(host, "x", emit=said.append) is None and not said


@pytest.mark.parametrize(
    "host, where",
    [
        ("0.0.0.0", "every network interface"),
        ("::", "every network interface"),
        ("192.168.1.20", "192.168.1.20"),
        ("proxy.example", "proxy.example"),
    ],
)
def test_other_addresses_get_one_warning_saying_what_is_exposed(host, where):
    said = []
    text = warn_if_exposed(host, "an unauthenticated route to http://127.0.0.1:8000", emit=said.append)
    assert not is_loopback(host) and said == [text]
    assert where in text and "unauthenticated route to http://127.0.0.1:8000" in text


def test_the_default_goes_to_stderr(capsys):
    warn_if_exposed("0.0.0.0", "the thing")
    out, err = capsys.readouterr()
    assert not out and "the thing" in err
