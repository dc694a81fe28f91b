"""Scan many files on every core: chunks of files to a process pool, findings back."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

from .engine import DEFAULT_LIMITS, Limits, scan_file
from .rules import ALL_RULES, Finding

# Below this many files a pool costs more (about 50 ms to start) than it saves.
MIN_FILES_FOR_POOL = 32
_BY_ID = {rule.id: rule for rule in ALL_RULES}


def _scan_chunk(
    paths: Sequence[str], rule_ids: Sequence[str], limits: Limits = DEFAULT_LIMITS
) -> list[Finding]:
    rules = [_BY_ID[rule_id] for rule_id in rule_ids]
    findings: list[Finding] = []
    for path in paths:
        findings.extend(scan_file(path, rules, limits))
    return findings


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def scan_files(
    paths: Sequence[str],
    rule_ids: Sequence[str],
    jobs: int = 0,
    limits: Limits = DEFAULT_LIMITS,
) -> list[Finding]:
    """The findings in ``paths``; ``jobs`` processes (0: one per core), one when few files."""
    jobs = jobs or default_jobs()
    if jobs <= 1 or len(paths) < MIN_FILES_FOR_POOL:
        return _scan_chunk(paths, rule_ids, limits)
    # Interleaved chunks spread the large files (which sort together) over the workers; several
    # chunks per worker balance the rest.
    count = min(len(paths), jobs * 8)
    chunks = [paths[i::count] for i in range(count)]
    findings: list[Finding] = []
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for part in pool.map(_scan_chunk, chunks, [rule_ids] * count, [limits] * count):
            findings.extend(part)
    return findings
