"""A progress bar for Spark work, fed by Spark's status tracker from a polling thread.

Each step of a run gets its own Spark job group and its own bar of tasks completed over
tasks known (the total grows as Spark plans further stages). Jobs Spark starts on its
own threads (Structured Streaming micro-batches) are counted too: every job that runs
while a step is open belongs to it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import TextIO

from pyspark.sql import SparkSession
from tqdm import tqdm

logger = logging.getLogger(__name__)

__all__ = ["SparkProgress"]


class SparkProgress:
    """``with progress.step("reading"):`` shows a task bar while Spark runs that step."""

    def __init__(
        self,
        spark: SparkSession,
        *,
        enabled: bool = True,
        interval_s: float = 0.5,
        stream: TextIO | None = None,
    ) -> None:
        self._spark = spark
        self._enabled = enabled
        self._interval_s = interval_s
        self._stream = stream

    @contextlib.contextmanager
    def step(self, description: str) -> Iterator[None]:
        sc = self._spark.sparkContext
        group = f"policy-audit-{uuid.uuid4().hex[:8]}"
        sc.setJobGroup(group, description)
        started = time.monotonic()
        if not self._enabled:
            try:
                yield
            finally:
                sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
                logger.info("%s took %.2fs", description, time.monotonic() - started)
            return
        tracker = sc.statusTracker()
        before = set(tracker.getActiveJobsIds())
        stop = threading.Event()
        bar = tqdm(total=0, desc=description, unit="task", file=self._stream, leave=True)

        def poll() -> None:
            jobs: set[int] = set()
            while True:
                try:
                    jobs.update(tracker.getJobIdsForGroup(group))
                    jobs.update(j for j in tracker.getActiveJobsIds() if j not in before)
                    done = total = 0
                    for job_id in jobs:
                        job = tracker.getJobInfo(job_id)
                        for stage_id in job.stageIds if job else ():
                            stage = tracker.getStageInfo(stage_id)
                            if stage is not None:
                                total += stage.numTasks
                                done += stage.numCompletedTasks
                    if total:
                        bar.total = total
                        bar.n = done
                        bar.refresh()
                except Exception:  # the tracker is advisory: never fail the audit for it
                    logger.debug("status tracker poll failed", exc_info=True)
                if stop.wait(self._interval_s):
                    return

        thread = threading.Thread(target=poll, name="policy-audit-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5)
            if bar.total:
                bar.n = bar.total
            bar.close()
            sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
            logger.info("%s took %.2fs", description, time.monotonic() - started)
