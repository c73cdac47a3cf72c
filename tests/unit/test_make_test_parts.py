"""What lets `make test` run its two pytest runs at once (the Makefile's `test`): a port range
for each."""

from __future__ import annotations

import pytest

from tests.conftest import PORTS, PORTS_ENV, own_ports, run_ports


def test_without_a_range_a_run_takes_every_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PORTS_ENV, raising=False)
    assert run_ports() == PORTS


def test_each_xdist_worker_gets_a_share_of_its_runs_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORTS_ENV, "10000-17999")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "6")
    shares = []
    for i in range(6):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{i}")
        shares.append(own_ports())
    assert shares[0].start == 10000 and shares[-1].stop <= 18000
    assert all(a.stop <= b.start for a, b in zip(shares, shares[1:], strict=False))
    # The other run's range is apart from every share of this one.
    monkeypatch.setenv(PORTS_ENV, "18000-19999")
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT")
    assert own_ports() == range(18000, 20000)


@pytest.mark.parametrize("given", ["9000-9999", "18000-21000", "19999-18000", "18000", "a-b"])
def test_a_range_outside_the_tests_ports_is_refused(
    monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    monkeypatch.setenv(PORTS_ENV, given)
    with pytest.raises(pytest.UsageError, match=PORTS_ENV):
        run_ports()

