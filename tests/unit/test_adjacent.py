"""Whole when adjacent, the one rule both doors tell spans by (`_core.adjacent`)."""

from __future__ import annotations

from operator import itemgetter

from otel_jobsteps._core.adjacent import Adjacency


class Told:
    def __init__(self) -> None:
        self.said: list[tuple[str, object]] = []

    def started(self, start: tuple[str, int]) -> None:
        self.said.append(("started", start))

    def whole(self, end: tuple[str, int]) -> None:
        self.said.append(("whole", end))

    def ended(self, end: tuple[str, int]) -> None:
        self.said.append(("ended", end))


def adjacency() -> tuple[Told, Adjacency[tuple[str, int]]]:
    told = Told()
    return told, Adjacency(told, itemgetter(1))


def test_a_start_followed_by_its_own_end_is_told_once_whole() -> None:
    told, adjacent = adjacency()
    adjacent.hold(("start", 1), whole=True)
    assert told.said == []
    assert adjacent.adjacent(("end", 1))
    assert told.said == [("whole", ("end", 1))]
    adjacent.release()  # nothing held any more
    assert told.said == [("whole", ("end", 1))]


def test_a_start_read_apart_from_its_end_is_told_start_then_end() -> None:
    told, adjacent = adjacency()
    adjacent.hold(("job start values", 1), whole=False)
    assert adjacent.adjacent(("end", 1))
    assert told.said == [("started", ("job start values", 1)), ("ended", ("end", 1))]


def test_another_span_s_end_or_start_tells_the_held_start_alone() -> None:
    told, adjacent = adjacency()
    adjacent.hold(("start", 1), whole=True)
    assert not adjacent.adjacent(("end", 2))  # nothing told: the door tells that end itself
    assert told.said == []
    adjacent.release()
    adjacent.hold(("start", 3), whole=True)  # a start held replaces none silently
    adjacent.hold(("start", 4), whole=True)
    adjacent.release()
    assert told.said == [
        ("started", ("start", 1)),
        ("started", ("start", 3)),
        ("started", ("start", 4)),
    ]


def test_an_end_with_nothing_held_is_left_to_the_door() -> None:
    told, adjacent = adjacency()
    assert not adjacent.adjacent(("end", 1))
    assert told.said == []
