"""What the receiving side of :mod:`gale.worker.transfer` counts and logs when it refuses something:
batches rejected before delivery, per reason (:mod:`gale.worker.batch_auth`), and messages of an
authentic batch found invalid (:mod:`gale.worker.wire`). The counts live in the transfer's
``stats`` (``rejected_batches_<reason>``, ``invalid_messages_<reason>``: the worker's metrics read
them); the first few of each reason are logged, then every 1000th."""

from __future__ import annotations

from typing import Any

from gale.log import get_logger

log = get_logger("transfer")

REJECT_MEANING = {
    "malformed": "not a Gale batch (wrong frames, version or sizes)",
    "bad_mac": "not sealed with this topology's secret for this worker (not part of this topology?)",
    "replayed": "a sequence number already received from that sender: a replayed batch",
    "stale": "sealed before this worker started (a replay of an old batch, or the sender's clock lags)",
}


def count_rejected(stats: dict[str, int], reason: str) -> None:
    """A batch refused for ``reason`` (a key of :data:`REJECT_MEANING`)."""
    stats["rejected_batches"] += 1
    key = f"rejected_batches_{reason}"
    stats[key] += 1
    if stats[key] <= 5 or stats[key] % 1000 == 0:
        log.warning("transfer-rejected-batch", reason=reason, rejected=stats[key], meaning=REJECT_MEANING[reason])


def count_invalid(stats: dict[str, int], invalid: dict[str, Any], before: int) -> None:
    """Bring ``stats`` up to the decoder's ``invalid`` counts per reason (``before``: the total
    ``stats`` had), logging the first ones of each reason and then every 1000th."""
    total = sum(invalid.values())
    if total == before:
        return
    stats["invalid_messages"] = total
    for reason, count in invalid.items():
        key = f"invalid_messages_{reason}"
        previous = stats[key]
        if count != previous:
            stats[key] = count
            if previous < 5 or count // 1000 != previous // 1000:
                log.warning("transfer-invalid-message", reason=reason, dropped=count)
