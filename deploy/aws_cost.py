"""What a run's hosts cost per hour, printed by `make aws-up` before anything is created.

A pinned table, not a price API call: the estimate must print without credentials or
network, and a table in the repository says which prices it assumed. On-demand, Linux,
us-east-1 (N. Virginia): the rates of the AWS EC2 on-demand price list
(https://aws.amazon.com/ec2/pricing/on-demand/) as published in 2025, written down 2026-11-23
without fetching the page again (the c5 rows match the ones AWS quotes in its EC2 Auto
Scaling guide). AWS changes prices rarely but does: check the page before a long run. Other
regions cost more (often 5-20 %).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

REGION = "us-east-1"

# $ per instance-hour, on-demand, Linux, us-east-1.
HOURLY_USD: Mapping[str, float] = {
    # Storage optimised: the broker (NVMe instance store; i3.4xlarge has two 1.9 TB devices).
    "i3.large": 0.156,
    "i3.xlarge": 0.312,
    "i3.2xlarge": 0.624,
    "i3.4xlarge": 1.248,
    "i3.8xlarge": 2.496,
    "i3.16xlarge": 4.992,
    "i3.metal": 4.992,
    # Compute optimised: the client hosts (Locust workers are CPU-bound per delivery).
    "c5.large": 0.085,
    "c5.xlarge": 0.17,
    "c5.2xlarge": 0.34,
    "c5.4xlarge": 0.68,
    "c5.9xlarge": 1.53,
    "c5.12xlarge": 2.04,
    "c5.18xlarge": 3.06,
    "c6i.large": 0.085,
    "c6i.xlarge": 0.17,
    "c6i.2xlarge": 0.34,
    "c6i.4xlarge": 0.68,
    "c6i.8xlarge": 1.36,
    "c7i.large": 0.08925,
    "c7i.xlarge": 0.1785,
    "c7i.2xlarge": 0.357,
    "c7i.4xlarge": 0.714,
    "c7i.8xlarge": 1.428,
    # General purpose.
    "m5.large": 0.096,
    "m5.xlarge": 0.192,
    "m5.2xlarge": 0.384,
    "m5.4xlarge": 0.768,
    "m6i.large": 0.096,
    "m6i.xlarge": 0.192,
    "m6i.2xlarge": 0.384,
    "m6i.4xlarge": 0.768,
}
# gp3 root volumes: $0.08 per GB-month, billed as 730 hours a month.
GP3_USD_PER_GB_HOUR = 0.08 / 730
# Every public IPv4 address (one per host): $0.005 per hour since February 2024.
PUBLIC_IPV4_USD_HOUR = 0.005


class UnknownInstanceType(ValueError):
    """An instance type the table does not hold: the estimate would be a guess."""


@dataclass(frozen=True, slots=True)
class Line:
    what: str
    count: int
    unit_usd: float

    @property
    def usd(self) -> float:
        return self.count * self.unit_usd


def estimate(broker_type: str, client_type: str, clients: int, root_volume_gb: int) -> list[Line]:
    """The hourly cost of one run's hosts, line by line (data transfer not included)."""
    for instance_type in (broker_type, client_type):
        if instance_type not in HOURLY_USD:
            raise UnknownInstanceType(
                f"no price for {instance_type!r} in deploy/aws_cost.py (known: "
                f"{', '.join(sorted(HOURLY_USD))}); add its {REGION} on-demand price there"
            )
    hosts = 1 + clients
    return [
        Line(f"broker {broker_type}", 1, HOURLY_USD[broker_type]),
        Line(f"clients {client_type}", clients, HOURLY_USD[client_type]),
        Line(f"gp3 root volumes {root_volume_gb} GB", hosts, root_volume_gb * GP3_USD_PER_GB_HOUR),
        Line("public IPv4 addresses", hosts, PUBLIC_IPV4_USD_HOUR),
    ]


def render(lines: list[Line]) -> str:
    """The table `make aws-up` prints, ending with the total per hour."""
    rows = [f"  {line.count:>3} x {line.what:<34} ${line.usd:>8.3f}/h" for line in lines]
    total = sum(line.usd for line in lines)
    return "\n".join(
        [
            f"Estimated cost, on-demand {REGION} prices (deploy/aws_cost.py):",
            *rows,
            f"  {'total':<40} ${total:>8.3f}/h  (~${total * 24:.2f} a day; data transfer extra)",
        ]
    )
