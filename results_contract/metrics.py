"""Metric names: the Tag= of every interval histogram and the keys of summary.json's
`latency` and `spectrum`; and the six latency stages of seed 000 (figure 6), in pipeline
order. The stage list is spelled here once; everything else derives from it.
"""

from __future__ import annotations

E2E = "e2e"  # from the intended send time (coordinated omission corrected)
E2E_ACTUAL = "e2e_actual"  # from the actual send time
E2E_KERNEL = "e2e_kernel"  # from the intended send time to the kernel's receive time
CLIENT_DELAY = "client_delay"  # the client's read time less the kernel's receive time
PUBLISH = "publish"
PUBLISH_DELAY = "publish_delay"
CONNECT = "connect"

# The two stages every driver tells apart: the first (producer to broker; without broker
# stamps, stages 1-5 as one span) and the last (dispatch to the consumer's read).
PRODUCING = "producing"
BROADCASTING = "broadcasting"
STAGES = (PRODUCING, "broker_in", "persistence", "notification", "broker_out", BROADCASTING)
# The stages only a broker that stamps its entries can tell apart; without those stamps
# (a real Pulsar) `producing` holds stages 1-5 as one span.
BROKER_STAGES = STAGES[1:5]

STAGE_PREFIX = "stage."


def stage_metric(stage: str) -> str:
    """`producing` -> `stage.producing`."""
    return STAGE_PREFIX + stage


STAGE_METRICS = tuple(stage_metric(stage) for stage in STAGES)
METRICS = (
    E2E,
    E2E_ACTUAL,
    E2E_KERNEL,
    CLIENT_DELAY,
    PUBLISH,
    PUBLISH_DELAY,
    CONNECT,
    *STAGE_METRICS,
)
