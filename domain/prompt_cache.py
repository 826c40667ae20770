"""Prompt caching: which prefix of a prompt a provider serves from its cache.

Pure, shared by the run and `plan` (docs/operations.md "Prompt caching"):

- `SharedPrefixes` keeps the prompts seen so far, sorted: the longest prefix a prompt
  shares with any of them is the one it shares with a neighbour in that order.
- `marked_prefix` is where the Anthropic provider ends the user-prompt block it marks
  `cache_control`: at the last whitespace within the shared prefix, so every prompt of a
  family (one template, other chunks) is cut at the same place and the cache can hit.
- `OpenAICache` and `AnthropicCache` are `plan`'s model of each provider's cache, as
  their references describe it: OpenAI caches any prompt prefix from 1,024 tokens in
  steps of 128; Anthropic caches the prefixes that end at a `cache_control` mark, of at
  least 1,024 tokens, written the first time (`cache_creation_input_tokens`) and read
  afterwards (`cache_read_input_tokens`). A token is four characters, as the run's
  estimates count them.
"""

from __future__ import annotations

import bisect
import collections
import enum
import math

CHARS_PER_TOKEN = 4
CACHE_MIN_TOKENS = 1024  # the shortest prefix either provider caches
OPENAI_CACHE_STEP = 128  # OpenAI caches in steps of this many tokens past the minimum
# the shortest part of a user prompt worth marking (a cache write costs more than input)
MARKED_MIN_TOKENS = 128
# how many of the latest prompts a run (and `plan`, online) compares a new one with: the
# providers keep a prefix minutes, and a run's memory stays bounded
RECENT_PROMPTS = 4096


class CacheKind(enum.StrEnum):
    """How a provider caches prompts (a profile's `provider`)."""

    AUTOMATIC = "automatic"  # OpenAI: every long prefix, nothing to mark
    MARKED = "marked"  # Anthropic: the prefixes marked `cache_control`
    NONE = "none"  # the offline profile, a replayed one


def estimate_tokens(text: str) -> int:
    """A prompt's tokens as the run estimates them (four characters a token)."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def prefix_tokens(chars: int) -> int:
    """Whole tokens in a prefix of `chars` characters."""
    return chars // CHARS_PER_TOKEN


def common_prefix(a: str, b: str) -> int:
    """How many leading characters `a` and `b` share."""
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while lo < hi:  # a[:lo] == b[:lo] and a[:hi+1] != b[:hi+1]
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class SharedPrefixes:
    """Prompts seen so far (the latest `limit` of them, or all): how much of a new one
    another already had (not thread-safe)."""

    def __init__(self, limit: int | None = None) -> None:
        self._sorted: list[str] = []  # with repeats
        self._limit = limit
        self._order: collections.deque[str] = collections.deque()  # oldest first

    def _near(self, text: str, i: int, j: int) -> int:
        """The longest prefix `text` shares with the prompts at `i` and `j` (if any)."""
        best = 0
        for k in (i, j):
            if 0 <= k < len(self._sorted):
                best = max(best, common_prefix(text, self._sorted[k]))
        return best

    def shared(self, text: str) -> int:
        """The longest prefix (characters) `text`, one of the prompts seen, shares with
        another of them."""
        i = bisect.bisect_left(self._sorted, text)
        if i < len(self._sorted) and self._sorted[i] == text:
            return self._near(text, i - 1, i + 1)
        return self._near(text, i - 1, i)

    def remember(self, text: str) -> int:
        """`add` for a new prompt; for one seen before (a retry), what it shares with
        another, without counting it twice."""
        i = bisect.bisect_left(self._sorted, text)
        if i < len(self._sorted) and self._sorted[i] == text:
            return self.shared(text)
        return self.add(text)

    def add(self, text: str) -> int:
        """Remember `text`; the longest prefix it shares with a prompt seen before it."""
        i = bisect.bisect_left(self._sorted, text)
        shared = self._near(text, i - 1, i)
        self._sorted.insert(i, text)
        if self._limit is not None:
            self._order.append(text)
            if len(self._order) > self._limit:
                oldest = self._order.popleft()
                del self._sorted[bisect.bisect_left(self._sorted, oldest)]
        return shared


def marked_prefix(text: str, shared: int, context_tokens: int = 0) -> int:
    """How many leading characters of the user prompt `text` the Anthropic provider marks
    for the cache, given that `shared` of them are another prompt's too: up to the last
    line break within them (so the prompts of one template, whatever their text, are cut
    at the same place), else the last whitespace when the prefix up to the line break is
    too short, the whitespace before it left out (all of `text` when another prompt is the
    same); 0 when that part is under 128 tokens (not worth a cache write), or when, with
    the `context_tokens` before it (the system prompt), it is shorter than the shortest
    prefix the provider caches."""
    if shared >= len(text):
        cut = len(text)
    else:
        head = text[:shared]
        # a template's text most often starts on a new line; the whitespace before the
        # break is left out too (chunks that start with a blank line or not cut alike)
        cut = len(head[: max(0, head.rfind("\n"))].rstrip())
        if cut == 0 or prefix_tokens(cut) + context_tokens < CACHE_MIN_TOKENS:
            cut = len(head[: max(0, head.rfind(" "), head.rfind("\t"), head.rfind("\n"))].rstrip())
    if prefix_tokens(cut) < MARKED_MIN_TOKENS:
        return 0
    if prefix_tokens(cut) + context_tokens < CACHE_MIN_TOKENS:
        return 0
    return cut


def openai_cached(shared_tokens: int, prompt_tokens: int) -> int:
    """The tokens OpenAI serves from its cache for a prompt whose first `shared_tokens`
    an earlier prompt had: from 1,024, in steps of 128."""
    if shared_tokens < CACHE_MIN_TOKENS:
        return 0
    steps = (shared_tokens - CACHE_MIN_TOKENS) // OPENAI_CACHE_STEP
    return min(CACHE_MIN_TOKENS + steps * OPENAI_CACHE_STEP, prompt_tokens)


class OpenAICache:
    """`plan`'s model of OpenAI's automatic prompt cache, fed prompts in the run's order."""

    def __init__(self) -> None:
        self._seen = SharedPrefixes(RECENT_PROMPTS)

    def request(self, text: str) -> tuple[int, int]:
        """(cached, written) prompt tokens of a request whose whole prompt is `text`."""
        shared = self._seen.add(text)
        return openai_cached(prefix_tokens(shared), estimate_tokens(text)), 0


class AnthropicCache:
    """`plan`'s model of Anthropic's prompt cache: the prefixes a request marks (each
    ending at a `cache_control` block), the longest of them already cached read, the
    longest beyond it written."""

    def __init__(self) -> None:
        self._cached: set[str] = set()

    def request(self, marks: list[str]) -> tuple[int, int]:
        """(read, written) prompt tokens of a request whose marked prefixes are `marks`."""
        eligible = [m for m in marks if prefix_tokens(len(m)) >= CACHE_MIN_TOKENS]
        read = max((prefix_tokens(len(m)) for m in eligible if m in self._cached), default=0)
        longest = max((prefix_tokens(len(m)) for m in eligible), default=0)
        self._cached.update(eligible)
        return read, max(0, longest - read)
