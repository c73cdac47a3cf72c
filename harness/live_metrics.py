"""`/metrics` while a run goes (`bench run --metrics-port P`), for Prometheus and Grafana.

A prometheus_client custom collector reads, when Prometheus scrapes, what the coordinator
already holds: each worker's last ProgressReport (harness/messages.py) and the run's plan,
phase and phase times. Nothing here is counted per delivery (STYLE.md, section 8): the
workers' recorders keep the totals, and the coordinator keeps, once per report and worker, the
few sums a scrape cannot rebuild (CPU seconds, measure seconds over the CPU limit, the worst
loop lag, the kernel latency intervals not yet merged). The client-bound verdicts so far come
from results_contract/client_bound.py, the rules the analysis judges with.

One server serves every case of a sweep; each case's series carry its run id and case label.
Besides `/metrics` it serves `/targets`, Prometheus's HTTP service discovery: this server,
and the broker's admin API (whose `/metrics` has Pulsar's names): the bundled broker's, whose
port changes every case, or the driver file's `adminUrl` (a Pulsar cluster's web port).
The metric names are listed in docs/results.md ("Live metrics").
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit
from wsgiref.simple_server import WSGIRequestHandler, make_server

from hdrh.histogram import HdrHistogram
from prometheus_client import make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector, CollectorRegistry

from harness.messages import PhaseTimes, ProgressReport
from harness.run_plan import RunPlan
from results_contract.client_bound import cpu_hot, distorted, loop_lag_too_long, too_many_hot
from results_contract.hlog import decode, new_histogram

if TYPE_CHECKING:  # worker_group imports Locust, which a test process of reports must not
    from harness.driver_config import DriverFile
    from harness.embedded_broker import EmbeddedBroker
    from harness.worker_group import WorkerGroup

PHASES = ("starting", "connect", "warmup", "measure", "backlog", "drain", "done")
"""The values of `fanout_run_phase`'s `phase` label; the coordinator's progress line shows the
middle five."""
QUANTILES = (("0.5", 50.0), ("0.99", 99.0), ("1", 100.0))
RUN_LABELS = ("run_id", "case", "testbed")
WORKER_LABELS = (*RUN_LABELS, "worker", "host")
METRICS = (
    "fanout_run_info",
    "fanout_run_phase",
    "fanout_consumers_expected",
    "fanout_consumers_connected",
    "fanout_consumers_failed",
    "fanout_consumers_short",
    "fanout_messages_sent_total",
    "fanout_deliveries_total",
    "fanout_deliveries_lost",
    "fanout_deliveries_out_of_order_total",
    "fanout_deliveries_duplicated_total",
    "fanout_kernel_latency_seconds",
    "fanout_worker_cpu_seconds_total",
    "fanout_worker_cpu_seconds_per_delivery",
    "fanout_worker_loop_lag_seconds",
    "fanout_client_bound",
)
"""Every sample name /metrics serves (docs/results.md lists the same)."""
MAX_PENDING = 60
"""Kernel intervals a worker's reports may leave undecoded between two scrapes."""
TARGETS_PATH = "/targets"
HARNESS_JOB = "fanout-bench"
BROKER_JOB = "broker"


class RunView(Protocol):
    """What the collector reads of the case being run: harness/coordinator.py's Coordinator."""

    plan: RunPlan
    driver: DriverFile
    phase: str
    current: PhaseTimes | None
    group: WorkerGroup | None
    broker: EmbeddedBroker | None


@dataclass
class _WorkerSums:
    """What one worker's reports add up to; kept per report, as a scrape may miss some."""

    cpu_s: float = 0.0
    measure_s: int = 0
    hot_s: int = 0
    max_loop_lag_ms: float = 0.0
    kernel_pending: list[str] = field(default_factory=list)
    """Interval kernel histograms (base64) not yet merged: decoded at the next scrape."""
    kernel_last: HdrHistogram | None = None


class LiveMetrics:
    """The HTTP server and the state of the case being run (`watch` at each case)."""

    def __init__(self, port: int, bind: str, testbed: str) -> None:
        self.testbed = testbed
        self.coordinator: RunView | None = None
        self.case = ""
        self.sums: dict[str, _WorkerSums] = {}
        self.kernel_run = new_histogram()
        """The measurement's e2e_kernel so far, every worker's intervals merged."""
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_RunCollector(self))
        metrics_app = make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
            if environ.get("PATH_INFO") == TARGETS_PATH:
                body = json.dumps(self.targets()).encode()
                start("200 OK", [("Content-Type", "application/json")])
                return [body]
            return metrics_app(environ, start)

        self.server = make_server(bind, port, app, ThreadingWSGIServer, handler_class=_Quiet)
        self.host = bind if bind not in ("", "0.0.0.0", "*") else "127.0.0.1"
        self.port = self.server.server_port
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def watch(self, coordinator: RunView, case: str) -> None:
        """From now on, serve this case's run."""
        self.coordinator, self.case = coordinator, case
        self.sums = {}
        self.kernel_run = new_histogram()

    def on_progress(self, report: ProgressReport) -> None:
        """Every worker report (WorkerGroup.on_progress): the sums a scrape cannot rebuild."""
        sums = self.sums.setdefault(report.worker_id, _WorkerSums())
        sums.cpu_s += report.cpu / 100.0  # one report a second, as the summary counts it
        coordinator = self.coordinator
        phases = None if coordinator is None else coordinator.current
        if phases is not None and phases.measure_start <= time.time() < phases.measure_end:
            sums.measure_s += 1
            sums.hot_s += cpu_hot(report.cpu)
            sums.max_loop_lag_ms = max(sums.max_loop_lag_ms, report.loop_lag_ms)
        if report.kernel_hist:
            sums.kernel_pending.append(report.kernel_hist)
            if len(sums.kernel_pending) >= MAX_PENDING:  # nobody scrapes: hold no more
                self._fold(sums)

    def targets(self) -> list[dict[str, Any]]:
        """Prometheus HTTP service discovery: this server, and the run's broker's admin API."""
        found = [{"targets": [f"{self.host}:{self.port}"], "labels": {"job": HARNESS_JOB}}]
        run = self.coordinator
        # The bundled broker's, or a broker of the driver file's (a Pulsar cluster's web port).
        admin = None if run is None else run.broker.admin_url if run.broker else run.plan.admin_url
        if admin:
            found.append({"targets": [urlsplit(admin).netloc], "labels": {"job": BROKER_JOB}})
        return found

    def merge_kernel(self) -> HdrHistogram:
        """Fold the pending kernel intervals into the run's histogram; the last interval of
        every worker, merged, is returned."""
        last = new_histogram()
        for sums in self.sums.values():
            self._fold(sums)
            if sums.kernel_last is not None:
                last.add(sums.kernel_last)
        return last

    def _fold(self, sums: _WorkerSums) -> None:
        for blob in sums.kernel_pending:
            sums.kernel_last = decode(blob)
            self.kernel_run.add(sums.kernel_last)
        sums.kernel_pending.clear()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """No line per scrape on the run's terminal."""


class _RunCollector(Collector):
    def __init__(self, live: LiveMetrics) -> None:
        self.live = live

    def collect(self) -> Iterator[Any]:
        live = self.live
        coordinator = live.coordinator
        if coordinator is None:
            return
        plan, workload = coordinator.plan, coordinator.plan.workload
        run = [plan.run_id, live.case, live.testbed]

        def gauge(name: str, doc: str, labels: tuple[str, ...] = RUN_LABELS) -> Any:
            return GaugeMetricFamily(f"fanout_{name}", doc, labels=list(labels))

        info = gauge(
            "run_info", "The run: its driver and subscription type", (*RUN_LABELS, "driver", "mode")
        )
        info.add_metric([*run, coordinator.driver.name, workload.subscription_type], 1)
        phase = gauge("run_phase", "1 for the phase the run is in", (*RUN_LABELS, "phase"))
        for name in PHASES:
            phase.add_metric([*run, name], float(name == coordinator.phase))
        expected = gauge("consumers_expected", "Consumers the workload asks for")
        expected.add_metric(run, workload.total_consumers)
        yield from (info, phase, expected)

        group = coordinator.group
        states = list(group.workers.values()) if group is not None else []
        connected = gauge("consumers_connected", "Consumers subscribed", WORKER_LABELS)
        failed = gauge("consumers_failed", "Consumers whose subscribe failed", WORKER_LABELS)
        sent = CounterMetricFamily(
            "fanout_messages_sent", "Sends the broker acknowledged", labels=WORKER_LABELS
        )
        delivered = CounterMetricFamily(
            "fanout_deliveries", "Deliveries read by consumers", labels=WORKER_LABELS
        )
        disorder = CounterMetricFamily(
            "fanout_deliveries_out_of_order",
            "Deliveries not above their consumer's last sequence number (repeats included)",
            labels=WORKER_LABELS,
        )
        repeats = CounterMetricFamily(
            "fanout_deliveries_duplicated",
            "Deliveries repeating their consumer's last sequence number",
            labels=WORKER_LABELS,
        )
        cpu = CounterMetricFamily(
            "fanout_worker_cpu_seconds", "CPU the worker process used", labels=WORKER_LABELS
        )
        per_delivery = gauge(
            "worker_cpu_seconds_per_delivery",
            "CPU per delivery over the worker's last second",
            WORKER_LABELS,
        )
        lag = gauge(
            "worker_loop_lag_seconds", "Worst event-loop lag of the last second", WORKER_LABELS
        )
        bound = gauge(
            "client_bound",
            "1 when a client-bound rule is broken so far (worker rules per worker)",
            (*WORKER_LABELS, "rule"),
        )
        totals = {"connected": 0, "failed": 0, "sent": 0, "received": 0}
        e2e_run = new_histogram()
        for state in states:
            report = state.progress or ProgressReport(state.worker_id)
            done = state.totals if state.finished else {}
            # Finished carries the totals after the recorder's last tick: the summary's.
            value = {
                "connected": done.get("connected", report.connected),
                "failed": done.get("failed", report.failed),
                "sent": done.get("sent", report.total_sent),
                "received": done.get("received", report.total_received),
            }
            for key in totals:
                totals[key] += value[key]
            labels = [*run, state.worker_id, group.hosts.get(state.worker_id, "") if group else ""]
            connected.add_metric(labels, value["connected"])
            failed.add_metric(labels, value["failed"])
            sent.add_metric(labels, value["sent"])
            delivered.add_metric(labels, value["received"])
            disorder.add_metric(labels, report.out_of_order)
            repeats.add_metric(labels, report.duplicated)
            sums = live.sums.get(state.worker_id, _WorkerSums())
            cpu.add_metric(labels, sums.cpu_s)
            if report.received:
                per_delivery.add_metric(labels, report.cpu / 100.0 / report.received)
            lag.add_metric(labels, report.loop_lag_ms / 1000.0)
            hot = too_many_hot(sums.hot_s, sums.measure_s)
            bound.add_metric([*labels, "cpu"], float(hot))
            bound.add_metric([*labels, "loop_lag"], float(loop_lag_too_long(sums.max_loop_lag_ms)))
            if report.e2e_hist:
                e2e_run.add(decode(report.e2e_hist))
        yield from (connected, failed, sent, delivered, disorder, repeats, cpu, per_delivery, lag)

        short = gauge("consumers_short", "Consumers neither subscribed nor failed (yet)")
        short.add_metric(
            run, max(0, workload.total_consumers - totals["connected"] - totals["failed"])
        )
        lost = gauge(
            "deliveries_lost",
            "Messages sent times deliveries per message, less deliveries made (in flight ones "
            "count until they arrive)",
        )
        owed = totals["sent"] * workload.expected_deliveries_per_message - totals["received"]
        lost.add_metric(run, max(0, owed))
        yield from (short, lost)

        last = live.merge_kernel()
        kernel = gauge(
            "kernel_latency_seconds",
            "End-to-end latency at the kernel's receive time over the last interval",
            (*RUN_LABELS, "quantile"),
        )
        if last.get_total_count():
            for label, percentile in QUANTILES:
                value_us = (
                    last.get_max_value()
                    if percentile == 100.0
                    else last.get_value_at_percentile(percentile)
                )
                kernel.add_metric([*run, label], value_us / 1e6)
        yield kernel
        if e2e_run.get_total_count() and live.kernel_run.get_total_count():
            e2e_ms = e2e_run.get_value_at_percentile(99) / 1000
            kernel_ms = live.kernel_run.get_value_at_percentile(99) / 1000
            bound.add_metric(
                [*run, "", "", "distortion"], float(distorted(e2e_ms - kernel_ms, e2e_ms))
            )
        yield bound
