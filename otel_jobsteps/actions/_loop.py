"""Running an async queue client's coroutine from the blocking actions API."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["run_coroutine"]

T = TypeVar("T")


def run_coroutine(coroutine: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coroutine)``; in a thread of its own when this thread already runs an event
    loop (the caller is async code, or a library such as Playwright's sync API keeps one)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1, thread_name_prefix="otel-jobsteps-action") as pool:
        return pool.submit(asyncio.run, coroutine).result()
