"""What ``serve``'s operator actions keep in the process: the bulk actions running in threads
of their own (progress, stop between batches) and the actions counter of ``/metrics``."""

from __future__ import annotations

import logging
import secrets
import threading
from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.core import Metric as PrometheusMetric
from prometheus_client.registry import Collector

from ..actions import ACTIONS, ActionResult
from ..actions.answers import DONE, NOT_FOUND, REFUSED
from ..actions.bulk import summary

__all__ = ["KEPT_BULKS", "ActionCounter", "BulkRun", "BulkRuns"]

KEPT_BULKS = 100
logger = logging.getLogger("otel_jobsteps.web")

Work = Callable[[threading.Event], list[ActionResult]]


class BulkRun:
    """One bulk action in its thread: how far it got, and a stop asked between batches."""

    def __init__(self, bulk_id: str, action: str, total: int) -> None:
        self.bulk_id, self.action, self.total = bulk_id, action, total
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._results: list[ActionResult] = []
        self._state = "running"

    def begin(self, work: Work, counter: ActionCounter) -> None:
        def run() -> None:
            try:
                results = work(self.stop)
                state = "stopped" if len(results) < self.total else "finished"
            except Exception:  # a lost database ends the run: its state says so
                logger.exception("bulk action %s failed", self.bulk_id)
                with self._lock:
                    results = self._results  # what was done before, as `advance` was told
                state = "failed"
            for result in results:  # counted once the run ends, a failed one too
                if not result.repeated:
                    counter.add(result.action, result.outcome)
            with self._lock:
                self._results, self._state = list(results), state

        threading.Thread(target=run, name=f"bulk-{self.bulk_id}", daemon=True).start()

    def advance(self, results: list[ActionResult]) -> None:
        with self._lock:
            self._results = list(results)

    def to_dict(self) -> dict[str, object]:
        with self._lock:
            results, state = list(self._results), self._state
        if state == "running" and self.stop.is_set():
            state = "stopping"
        return {
            "bulk_id": self.bulk_id,
            "action": self.action,
            "state": state,
            "matched": self.total,
            "acted": len(results),
            **summary(results),
            "url": f"/api/actions/{self.bulk_id}",
        }


class BulkRuns:
    """The bulk actions of this process, the newest `KEPT_BULKS` kept for their progress."""

    def __init__(self) -> None:
        self._runs: dict[str, BulkRun] = {}
        self._lock = threading.Lock()

    def start(self, action: str, total: int) -> BulkRun:
        run = BulkRun(secrets.token_hex(8), action, total)
        with self._lock:
            self._runs[run.bulk_id] = run
            while len(self._runs) > KEPT_BULKS:
                self._runs.pop(next(iter(self._runs)))
        return run

    def get(self, bulk_id: str) -> BulkRun | None:
        with self._lock:
            return self._runs.get(bulk_id)


class ActionCounter(Collector):
    """``otel_jobsteps_actions_total{action,outcome}``: the actions this process ran."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def add(self, action: str, outcome: str) -> None:
        with self._lock:
            self._counts[(action, outcome)] += 1

    def collect(self) -> Iterator[PrometheusMetric]:
        family = CounterMetricFamily(
            "otel_jobsteps_actions",
            "Operator actions this server ran, by action and outcome",
            labels=("action", "outcome"),
        )
        with self._lock:
            counted = dict(self._counts)
        for action in ACTIONS:
            for outcome in (DONE, REFUSED, NOT_FOUND):
                family.add_metric((action, outcome), counted.get((action, outcome), 0))
        yield family
