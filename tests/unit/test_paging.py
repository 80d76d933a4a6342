"""Paging of answers over the NATS max_payload: split sizes, tokens in order, the cache's byte and time bounds."""

from __future__ import annotations

import time

import pytest

from ranksight.aggregator.api.paging import PageCache, PageExpired, RowTooLarge, split_pages
from ranksight.schemas.api import ApiResponse


def answer(n: int, pad: int = 100) -> ApiResponse:
    return ApiResponse.success([{"i": i, "pad": "x" * pad} for i in range(n)], truncated=True, meta={"m": 1})


def test_pages_fit_and_keep_every_row_in_order() -> None:
    whole = answer(1000)
    pages = split_pages(whole, 10_000)
    assert len(pages) > 10
    assert all(len(p.model_dump_json().encode()) <= 10_000 - 200 for p in pages)
    assert [r for p in pages for r in p.rows] == whole.rows
    assert all(p.truncated and p.meta == {"m": 1} for p in pages)
    assert split_pages(answer(3), 10_000) == [answer(3)]


def test_a_row_over_the_limit_is_an_error() -> None:
    with pytest.raises(RowTooLarge, match="row 2 alone is"):
        split_pages(ApiResponse.success([{"a": 1}, {"a": "x" * 5000}]), 1000)


def test_tokens_walk_the_pages_once() -> None:
    cache = PageCache(max_bytes=1 << 20, ttl_s=60)
    pages = split_pages(answer(500), 5000)
    page = cache.first(pages)
    rows = list(page.rows)
    while page.next:
        token = page.next
        page = cache.take(token)
        rows.extend(page.rows)
        with pytest.raises(PageExpired):
            cache.take(token)  # a page is handed out once
    assert rows == answer(500).rows


def test_cache_is_bounded_in_bytes_and_time() -> None:
    cache = PageCache(max_bytes=60_000, ttl_s=0.2)
    first = cache.first(split_pages(answer(400), 5000))  # ~45 KB kept
    second = cache.first(split_pages(answer(400), 5000))  # over the bound: the first answer's pages go
    assert first.next and second.next
    with pytest.raises(PageExpired, match="run the query again"):
        cache.take(first.next)
    time.sleep(0.3)
    with pytest.raises(PageExpired):
        cache.take(second.next)
    assert cache._size == 0
