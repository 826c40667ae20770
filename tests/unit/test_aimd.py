"""The adaptive concurrency window (domain/aimd.py) and the limiter that applies it.

Issue 26 defect 3: one 429 must shrink one endpoint's window, never pause every call.
"""

from __future__ import annotations

import threading

from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.adapters.llm.ratelimit import EndpointLimiter
from runjournal.domain import aimd

EVENTS = st.lists(
    st.one_of(
        st.just(("reply", 0, 0)),
        st.tuples(st.just("429"), st.integers(0, 8), st.integers(0, 2000)),
    ),
    max_size=200,
)


@settings(max_examples=300, deadline=None)
@given(ceiling=st.integers(1, 2048), events=EVENTS)
def test_the_window_stays_between_one_and_the_ceiling(ceiling: int, events: list) -> None:
    window = aimd.opened(ceiling)
    for kind, epoch, in_flight in events:
        before = window
        if kind == "reply":
            window = aimd.on_reply(window)
            assert window.size >= before.size and window.epoch == before.epoch
        else:
            window = aimd.on_rate_limited(window, started_epoch=epoch, in_flight=in_flight)
            assert window.size <= before.size and window.epoch >= before.epoch
        assert 1 <= window.limit <= window.ceiling == max(1, ceiling)
        assert 1.0 <= window.size <= float(window.ceiling)


@given(in_flight=st.integers(2, 1024), burst=st.integers(1, 50))
def test_a_burst_of_429s_from_one_round_decreases_once(in_flight: int, burst: int) -> None:
    window = aimd.opened(aimd.DEFAULT_CEILING)
    started = window.epoch
    for _ in range(burst):
        window = aimd.on_rate_limited(window, started_epoch=started, in_flight=in_flight)
    assert window.epoch == started + 1
    assert window.size == max(1.0, min(in_flight, aimd.DEFAULT_CEILING) * aimd.DECREASE)


@given(in_flight=st.integers(1, 512))
def test_a_halved_window_recovers_within_one_window_of_replies(in_flight: int) -> None:
    window = aimd.opened(in_flight)
    window = aimd.on_rate_limited(window, started_epoch=0, in_flight=in_flight)
    for _ in range(in_flight):
        window = aimd.on_reply(window)
    assert window.limit == in_flight


def test_sustained_429s_reach_one() -> None:
    window = aimd.opened(64)
    for _ in range(10):
        window = aimd.on_rate_limited(window, started_epoch=window.epoch, in_flight=64)
    assert window.limit == 1


@given(ceiling=st.integers(1, 100), tighter=st.integers(1, 100))
def test_a_stricter_ceiling_caps_the_window(ceiling: int, tighter: int) -> None:
    window = aimd.with_ceiling(aimd.opened(ceiling), tighter)
    assert window.limit <= tighter


def test_a_429_shrinks_the_limiter_window_and_holds_no_other_caller() -> None:
    limiter = EndpointLimiter()
    tickets = [limiter.acquire(1) for _ in range(8)]
    limiter.release(tickets.pop(), 0, limited=True)  # 8 in flight: the window is 4
    assert limiter.concurrency_window == 4 and limiter.rate_limited == 1
    for ticket in tickets[3:]:
        limiter.release(ticket, 1, answered=True)  # 4 replies: back to 8
    assert limiter.concurrency_window == 8
    acquired = threading.Event()

    def other() -> None:
        limiter.release(limiter.acquire(1), 1, answered=True)
        acquired.set()

    thread = threading.Thread(target=other)
    thread.start()
    assert acquired.wait(5)  # no endpoint-wide pause after the 429
    thread.join()
    for ticket in tickets[:3]:
        limiter.release(ticket, 1, answered=True)


def test_max_concurrency_stays_a_hard_cap() -> None:
    limiter = EndpointLimiter(max_concurrency=3)
    for _ in range(100):
        limiter.release(limiter.acquire(1), 1, answered=True)
    assert limiter.concurrency_window == 3
