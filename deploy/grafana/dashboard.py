"""Build the Grafana dashboard of a run: `python deploy/grafana/dashboard.py` writes
deploy/grafana/fanout-bench.json beside it (commit both; a test checks they agree).

Built with grafana-foundation-sdk (Grafana's own builders) rather than hand-edited JSON. The
harness's panels (bench run --metrics-port, harness/live_metrics.py; docs/results.md, "Live
metrics") sit above the broker's, which read the names Pulsar's brokers serve on /metrics and
the bundled broker serves too (`pulsar_*`, `process_*`), so the lower half works for an Apache
Pulsar cluster as well. Variables: the Prometheus data source, the run id (all runs by
default) and the broker's scrape job (`broker`, as deploy/ansible's Prometheus names it and
the coordinator's /targets does).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import common, dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import (
    BigValueGraphMode,
    BigValueTextMode,
    LegendDisplayMode,
    LegendPlacement,
    TooltipDisplayMode,
)
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    VariableOption,
)

OUTPUT = Path(__file__).resolve().parent / "fanout-bench.json"
UID = "fanout-bench"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
RUN = 'run_id=~"$run_id"'
BROKER = 'job=~"$broker_job"'
RATE = "$__rate_interval"


def _query(expr: str, legend: str, ref: str = "A") -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref)


def _series(
    title: str, unit: str, queries: list[tuple[str, str]], description: str
) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .datasource(DATASOURCE)
        .height(8)
        .span(8)
        .legend(
            common.VizLegendOptions()
            .show_legend(True)
            .display_mode(LegendDisplayMode.LIST)
            .placement(LegendPlacement.BOTTOM)
        )
        .tooltip(common.VizTooltipOptions().mode(TooltipDisplayMode.MULTI))
    )
    for ref, (expr, legend) in zip("ABCDEFGH", queries, strict=False):
        panel = panel.with_target(_query(expr, legend, ref))
    return panel


HARNESS: list[stat.Panel | timeseries.Panel] = [
    stat.Panel()
    .title("Phase")
    .description("The phase the run is in (fanout_run_phase)")
    .datasource(DATASOURCE)
    .with_target(_query(f"fanout_run_phase{{{RUN}}} == 1", "{{case}}: {{phase}}"))
    .graph_mode(BigValueGraphMode.NONE)
    .text_mode(BigValueTextMode.NAME)
    .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    .height(4)
    .span(24),
    _series(
        "Consumers",
        "short",
        [
            (f"sum(fanout_consumers_expected{{{RUN}}})", "expected"),
            (f"sum(fanout_consumers_connected{{{RUN}}})", "connected"),
            (f"sum(fanout_consumers_failed{{{RUN}}})", "failed"),
            (f"sum(fanout_consumers_short{{{RUN}}})", "short"),
        ],
        "Subscribed, failed, and neither yet",
    ),
    _series(
        "Sends and deliveries",
        "ops",
        [
            (f"sum(rate(fanout_messages_sent_total{{{RUN}}}[{RATE}]))", "sent/s"),
            (f"sum(rate(fanout_deliveries_total{{{RUN}}}[{RATE}]))", "delivered/s"),
        ],
        "Acknowledged sends and deliveries read, per second",
    ),
    _series(
        "Latency at the kernel (last interval)",
        "s",
        [(f"max by (quantile) (fanout_kernel_latency_seconds{{{RUN}}})", "q{{quantile}}")],
        "End-to-end latency to the kernel's receive time, P50, P99 and max of the workers' "
        "last interval merged (measure phase only)",
    ),
    _series(
        "Deliveries lost, duplicated, out of order",
        "short",
        [
            (f"sum(fanout_deliveries_lost{{{RUN}}})", "owed (lost at the end)"),
            (f"sum(fanout_deliveries_duplicated_total{{{RUN}}})", "duplicated"),
            (f"sum(fanout_deliveries_out_of_order_total{{{RUN}}})", "out of order"),
        ],
        "Owed: sent × deliveries per message − delivered; in-flight ones count until they arrive",
    ),
    _series(
        "Worker CPU",
        "percentunit",
        [(f"rate(fanout_worker_cpu_seconds_total{{{RUN}}}[{RATE}])", "{{worker}} on {{host}}")],
        "Share of one core per worker process (client-bound above 0.9)",
    ),
    _series(
        "Worker CPU per delivery",
        "s",
        [
            (
                f"sum by (worker) (rate(fanout_worker_cpu_seconds_total{{{RUN}}}[{RATE}])) / "
                f"sum by (worker) (rate(fanout_deliveries_total{{{RUN}}}[{RATE}]))",
                "{{worker}}",
            )
        ],
        "The client's CPU seconds per delivery read",
    ),
    _series(
        "Worker event-loop lag",
        "s",
        [(f"fanout_worker_loop_lag_seconds{{{RUN}}}", "{{worker}}")],
        "Worst lag of each worker's last second (client-bound above 0.1 s)",
    ),
    _series(
        "Client-bound rules broken so far",
        "short",
        [(f"fanout_client_bound{{{RUN}}} == 1", "{{rule}} {{worker}}")],
        "A series at 1 per rule broken (cpu and loop_lag per worker, distortion per run)",
    ),
]

BROKER_PANELS: list[timeseries.Panel] = [
    _series(
        "Broker CPU",
        "percentunit",
        [(f"rate(process_cpu_seconds_total{{{BROKER}}}[{RATE}])", "{{instance}}")],
        "Share of one core (process_cpu_seconds_total, Pulsar's and the bundled broker's)",
    ),
    _series(
        "Broker resident memory",
        "bytes",
        [(f"process_resident_memory_bytes{{{BROKER}}}", "{{instance}}")],
        "process_resident_memory_bytes",
    ),
    _series(
        "Messages into the broker",
        "ops",
        [(f"sum(rate(pulsar_in_messages_total{{{BROKER}}}[{RATE}]))", "in/s")],
        "pulsar_in_messages_total, over every topic",
    ),
    _series(
        "Consumers on the broker",
        "short",
        [(f"sum(pulsar_consumers_count{{{BROKER}}})", "consumers")],
        "pulsar_consumers_count, over every subscription",
    ),
    _series(
        "Subscription backlog",
        "short",
        [(f"sum(pulsar_subscription_back_log{{{BROKER}}})", "backlog")],
        "pulsar_subscription_back_log, over every subscription",
    ),
    _series(
        "Dispatch throttled",
        "short",
        [
            (
                f"sum(rate(pulsar_subscription_dispatch_throttled_msg_events{{{BROKER}}}[{RATE}]))",
                "throttled/s",
            )
        ],
        "pulsar_subscription_dispatch_throttled_msg_events per second",
    ),
]


def build() -> dashboard.Dashboard:
    board = (
        dashboard.Dashboard("fan-out bench: a run and its broker")
        .uid(UID)
        .tags(["fanout-bench"])
        .refresh("5s")
        .time("now-30m", "now")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .with_variable(
            dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus")
        )
        .with_variable(
            dashboard.QueryVariable("run_id")
            .label("Run")
            .datasource(DATASOURCE)
            .query("label_values(fanout_run_info, run_id)")
            .include_all(True)
            .all_value(".*")
            .multi(True)
        )
        .with_variable(
            dashboard.QueryVariable("broker_job")
            .label("Broker job")
            .datasource(DATASOURCE)
            .query("label_values(up, job)")
            .current(VariableOption(selected=True, text="broker", value="broker"))
        )
        .with_row(dashboard.Row("The harness (bench run --metrics-port)").id(100))
    )
    panel_id = 1
    for panel in HARNESS:
        board, panel_id = board.with_panel(panel.id(panel_id)), panel_id + 1
    board = board.with_row(dashboard.Row("The broker (its own /metrics)").id(panel_id))
    for panel in BROKER_PANELS:
        panel_id += 1
        board = board.with_panel(panel.id(panel_id))
    return board


def render() -> str:
    return json.dumps(build().build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def expressions(board: dict) -> list[str]:
    """Every PromQL expression of a built dashboard: its panels' and its query variables'."""
    found = [t["expr"] for p in board.get("panels", []) for t in p.get("targets", [])]
    for variable in board.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable.get("query")
            found.append(query["query"] if isinstance(query, dict) else query)
    return found


if __name__ == "__main__":
    OUTPUT.write_text(render())
    print(OUTPUT, file=sys.stderr)
