import pytest

from broker.storage.position import Position


def test_prints_pulsar_notation_and_parses_it_back() -> None:
    assert str(Position(5, 1226)) == "5:1226"
    assert Position.parse("5:1226") == Position(5, 1226)
    assert Position.parse(str(Position(-1, -1))) == Position(-1, -1)


@pytest.mark.parametrize("text", ["5", "5:x", ""])
def test_parse_rejects_what_is_not_a_position(text: str) -> None:
    with pytest.raises(ValueError):
        Position.parse(text)


def test_orders_by_ledger_then_entry() -> None:
    assert Position(5, 49_999) < Position(6, 0) < Position(6, 1)
    assert sorted([Position(6, 0), Position(5, 7), Position(5, 10)]) == [
        Position(5, 7),
        Position(5, 10),
        Position(6, 0),
    ]
