"""An endpoint's adaptive concurrency window: additive increase, multiplicative decrease.

A 429 says "fewer requests at once"; a reply says "this many worked". The window (how
many requests may be in flight to one endpoint) shrinks by `decrease` at a 429 and grows
by `increase` at each reply, between 1 and a ceiling (the profile's `max_concurrency`,
or `DEFAULT_CEILING`). Two choices differ from TCP's textbook AIMD, for the reasons in
docs/operations.md "Rate limits and adaptive concurrency":

- A decrease starts from the requests really in flight, not the window (a window of
  1,024 that never held more than 32 would take five halvings to mean anything).
- The increase is per reply, not per window of replies: providers answer a few 429s
  at random under their limits, and a per-round increase (Reno's 1/window) settles
  near 1.2/sqrt(p) requests in flight, about 6 at a 3.5% 429 rate. One slot per reply
  recovers a halved window within one window of replies; under sustained 429s the
  window still halves once per round and reaches 1.
- 429s of requests sent before the last decrease are the same signal, not a new one
  (`epoch`): a burst of them halves the window once.

Pure: the limiter (adapters/llm/ratelimit.py) owns the lock and the clock.
"""

from __future__ import annotations

import msgspec

DEFAULT_CEILING = 1024  # the highest `max_concurrency`: no other cap until a 429
DECREASE = 0.5
INCREASE = 1.0


class Window(msgspec.Struct, frozen=True, kw_only=True):
    """The window and the decrease epoch (requests remember the epoch they started in)."""

    size: float
    ceiling: int
    epoch: int = 0

    @property
    def limit(self) -> int:
        """Requests that may be in flight now (at least 1)."""
        return max(1, min(self.ceiling, int(self.size)))


def opened(ceiling: int) -> Window:
    """A fresh endpoint: the window starts at the ceiling (no cap until a 429)."""
    top = max(1, ceiling)
    return Window(size=float(top), ceiling=top)


def on_reply(window: Window, increase: float = INCREASE) -> Window:
    """A reply (anything but a 429) arrived: one more slot, up to the ceiling."""
    if window.size >= window.ceiling:
        return window
    return msgspec.structs.replace(window, size=min(float(window.ceiling), window.size + increase))


def on_rate_limited(
    window: Window, *, started_epoch: int, in_flight: int, decrease: float = DECREASE
) -> Window:
    """A 429 for a request started in `started_epoch` while `in_flight` were in flight.

    Only a request started since the last decrease shrinks the window again.
    """
    if started_epoch < window.epoch:
        return window
    base = min(window.size, float(max(1, in_flight)))
    return Window(size=max(1.0, base * decrease), ceiling=window.ceiling, epoch=window.epoch + 1)


def with_ceiling(window: Window, ceiling: int) -> Window:
    """A stricter `max_concurrency` from another profile on the same endpoint."""
    top = max(1, ceiling)
    return Window(size=min(window.size, float(top)), ceiling=top, epoch=window.epoch)
