"""Masters that did not answer (lowkiq.clients.outages): calls to one fail at once, unsent,
until its retry is due; the retries back off while it stays silent, and one answer puts
it back in service."""

from __future__ import annotations

from lowkiq.clients.outages import FIRST_RETRY, MAX_RETRY, MasterDown, Outages
from tests.moved_clock import Clock


def test_a_silent_master_is_tried_again_later_and_less_often_until_it_answers() -> None:
    clock = Clock()
    outages = Outages(clock)
    assert outages.check("a:1") is None
    sent = outages.failed("a:1", TimeoutError("no answer"))
    assert sent.sent and isinstance(sent, MasterDown)
    waits = []
    for _ in range(7):
        started = clock()
        while (refused := outages.check("a:1")) is not None:
            assert not refused.sent
            assert outages.check("b:2") is None  # the other masters are sent to
            clock.now += 0.05
        waits.append(round(clock() - started, 2))
        outages.failed("a:1", TimeoutError("no answer"))
    # Doubling from FIRST_RETRY up to MAX_RETRY, each wait jittered between half and all.
    for wait, full in zip(waits, [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0], strict=True):
        assert full / 2 - 0.051 <= wait <= full + 0.051
    assert waits[0] >= FIRST_RETRY / 2 - 0.051 and max(waits) <= MAX_RETRY + 0.051
    assert "a:1" in outages
    assert outages.answered("a:1")
    assert "a:1" not in outages and outages.check("a:1") is None
    assert not outages.answered("a:1")
    # Silent again: the retries start over from the first wait.
    outages.failed("a:1", TimeoutError("no answer"))
    clock.now += FIRST_RETRY
    assert outages.check("a:1") is None
