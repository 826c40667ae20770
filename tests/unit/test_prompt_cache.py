"""domain/prompt_cache.py: shared prefixes, marks and the providers' cache models
(docs/operations.md "Prompt caching")."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from runjournal.domain.prompt_cache import (
    AnthropicCache,
    OpenAICache,
    SharedPrefixes,
    common_prefix,
    marked_prefix,
    openai_cached,
)


def _brute(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@given(st.text(alphabet="ab ", max_size=12), st.text(alphabet="ab ", max_size=12))
def test_common_prefix(a: str, b: str) -> None:
    assert common_prefix(a, b) == _brute(a, b)


@given(st.lists(st.text(alphabet="abc ", max_size=10), max_size=12))
def test_shared_is_the_longest_prefix_shared_with_any_earlier_prompt(prompts: list[str]) -> None:
    seen = SharedPrefixes()
    for i, text in enumerate(prompts):
        expected = max((_brute(text, p) for p in prompts[:i]), default=0)
        assert seen.add(text) == expected


def test_marks_cut_at_whitespace_and_need_the_minimum() -> None:
    head = "word " * 1100  # 5,500 characters: 1,375 tokens
    a, b = head + "alpha beta", head + "alpine"
    shared = common_prefix(a, b)  # ends inside "alp"
    assert marked_prefix(a, shared) == marked_prefix(b, shared) == len(head) - 1
    assert marked_prefix("word " * 10 + "x", 50) == 0  # too short to cache
    assert marked_prefix("word " * 10 + "x", 50, context_tokens=2000) == 0  # not worth it
    assert marked_prefix("word " * 200 + "x", 1000, context_tokens=2000) == 999
    assert marked_prefix(a, len(a)) == len(a)  # the same prompt: all of it


def test_openai_caches_from_1024_in_steps_of_128() -> None:
    assert openai_cached(1023, 5000) == 0
    assert openai_cached(2000, 5000) == 1920
    assert openai_cached(2000, 1500) == 1500
    cache = OpenAICache()
    text = "abc " * 2000 + "tail one"
    assert cache.request(text) == (0, 0)
    assert cache.request("abc " * 2000 + "tail two") == (1920, 0)


def test_anthropic_writes_then_reads_the_marked_prefixes() -> None:
    system, longer = "s" * 8000, "s" * 8000 + " and more" * 600
    cache = AnthropicCache()
    assert cache.request([system]) == (0, 2000)
    assert cache.request([system, longer]) == (2000, len(longer) // 4 - 2000)
    assert cache.request([system, longer]) == (len(longer) // 4, 0)
    assert cache.request(["short"]) == (0, 0)


@given(st.lists(st.text(alphabet="abc ", max_size=10), min_size=1, max_size=12))
def test_shared_within_a_batch_is_with_any_other_prompt(prompts: list[str]) -> None:
    seen = SharedPrefixes()
    for text in prompts:
        seen.add(text)
    for i, text in enumerate(prompts):
        others = prompts[:i] + prompts[i + 1 :]
        assert seen.shared(text) == max((_brute(text, p) for p in others), default=0)


def test_marks_prefer_the_last_line_break() -> None:
    template = "rule " * 1100 + "\n\n"
    texts = ("Doc 0 part 1", "\nDoc 0 part 2", "Doc 1 part 1", "\n\nDoc 1 part 2")
    prompts = [template + t for t in texts]
    cuts = {marked_prefix(x, common_prefix(x, y)) for x in prompts for y in prompts if x != y}
    assert cuts == {len(template.rstrip())}


def test_a_window_forgets_the_oldest_prompts() -> None:
    seen = SharedPrefixes(limit=2)
    assert seen.add("alpha one") == 0
    seen.add("beta")
    seen.add("gamma")  # "alpha one" is forgotten
    assert seen.add("alpha two") == 0
    assert seen.add("alpha three") == len("alpha t")
    assert seen.remember("alpha three") == len("alpha t")  # seen: with another, not itself
