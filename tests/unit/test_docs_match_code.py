"""Where a doc lists keys, settings, files, metrics or rules the code defines, the list is
checked against the code (issue 37), so that one added to the code without its doc row fails
`make test`. Each check is a function of the doc's text; each has a test showing it catches a
missing row, by running it on the doc with that row taken out.

The native driver's key table is checked in tests/unit/test_driver_docs.py, the workload keys
in tests/unit/test_workload_golden.py.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from enum import StrEnum
from pathlib import Path, PurePath

import pytest

import results_contract
from broker.admin.http import ROUTES, Route
from broker.config import BrokerConfig
from harness.broker_command import _KEYS as EMBEDDED_BROKER_KEYS
from harness.cli import COMMANDS, USAGE
from harness.driver_config import HARNESS_KEYS
from reports.changes import DERIVED
from reports.gate import DEFAULT_RULES, EXACT_METRICS
from reports.metrics import METRICS
from results_contract import client_bound, columns, metrics, paths, summary
from results_contract.metrics import STAGES

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = {
    name: value
    for name, value in vars(columns).items()
    if name.endswith("_COLUMNS") and isinstance(value, Mapping)
}
"""Every column list of results_contract/columns.py, by its constant's name."""


def _read(page: str) -> str:
    return (ROOT / page).read_text()


def _named(text: str) -> set[str]:
    """Every `code span` of a text."""
    return set(re.findall(r"`([^`\n]+)`", text))


def _between(text: str, start: str, end: str) -> str:
    """The text from the first `start` to the next `end` after it."""
    assert start in text, f"the doc lost its {start!r}"
    return text.split(start, 1)[1].split(end, 1)[0]


# -- the bundled broker's settings: README's "Settings honoured" and the pages it links ---------
def settings_paragraph(readme: str) -> str:
    return _between(readme, "Settings honoured", "\n\n")


def undocumented_settings(readme: str, read: Callable[[str], str] = _read) -> list[str]:
    """Broker settings (broker/config.py) named neither in README's "Settings honoured"
    paragraph nor in a docs page it links."""
    paragraph = settings_paragraph(readme)
    pages = re.findall(r"\]\((docs/[\w-]+\.md)\)", paragraph)
    named = _named(paragraph).union(*(_named(read(page)) for page in pages))
    return [f.name for f in fields(BrokerConfig) if f.name not in named]


def wrong_setting_defaults(readme: str) -> list[str]:
    """`name` (default N) in the paragraph where N is not the broker's default."""
    defaults = {f.name: f.default for f in fields(BrokerConfig)}
    found = re.findall(r"`(\w+)` \(default ([\d.]+)", settings_paragraph(readme))
    return [
        f"{name}: {shown} (code: {defaults.get(name)})"
        for name, shown in found
        if defaults.get(name) != float(shown)
    ]


def _default(shown: str) -> object:
    """A default as a settings table writes it: `false`, `""`, empty, 30, 5 MiB."""
    shown = shown.strip().strip("`")
    if shown.startswith("empty"):
        return None
    if shown in ('""', "true", "false"):
        return {'""': "", "true": True, "false": False}[shown]
    number = re.fullmatch(r"(-?[\d.]+)( MiB)?", shown)
    if number:
        return float(number.group(1)) * (1024 * 1024 if number.group(2) else 1)
    return shown


def wrong_table_defaults(text: str) -> list[str]:
    """Rows `| `setting`[, `setting`] | default[, default] (note) |` of a page whose default
    is not the broker's; one default given for several settings applies to each."""
    defaults = {f.name: f.default for f in fields(BrokerConfig)}
    problems = []
    for names, shown in re.findall(r"^\| ((?:`\w+`(?:, )?)+) \| ([^|]+) \|", text, re.M):
        settings = re.findall(r"`(\w+)`", names)
        if not all(name in defaults for name in settings):
            continue  # another table: keys of a driver file, policies
        values = [_default(v) for v in re.sub(r"\([^)]*\)", "", shown).split(",")]
        if len(values) == 1:
            values *= len(settings)
        for name, value in zip(settings, values, strict=False):
            code = defaults[name]
            if isinstance(code, int | float) and not isinstance(code, bool):
                same = value == float(code)
            else:
                same = value == code
            if len(values) != len(settings) or not same:
                problems.append(f"{name}: {shown.strip()} (code: {code!r})")
    return problems


def test_the_settings_tables_give_the_brokers_defaults() -> None:
    for page in ("docs/security.md", "docs/policies.md"):
        assert wrong_table_defaults(_read(page)) == [], page
    assert len(re.findall(r"^\| `maxProducersPerTopic` \|", _read("docs/security.md"), re.M)) == 1


def test_a_wrong_default_in_a_table_is_caught() -> None:
    text = _read("docs/policies.md")
    assert wrong_table_defaults(text.replace("| true, 60 |", "| true, 30 |")) == [
        "backlogQuotaCheckIntervalInSeconds: true, 30 (code: 60.0)"
    ]


def test_every_broker_setting_is_documented() -> None:
    readme = _read("README.md")
    assert undocumented_settings(readme) == []
    assert wrong_setting_defaults(readme) == []
    assert re.findall(r"`(\w+)` \(default", settings_paragraph(readme))  # defaults were seen


def test_a_setting_without_its_doc_is_caught() -> None:
    readme = _read("README.md")
    assert undocumented_settings(readme.replace("`statsDir`", "statsDir")) == ["statsDir"]
    pages_lost = undocumented_settings(readme, read=lambda page: "")
    assert "tlsCertificateFilePath" in pages_lost  # named only in docs/security.md
    assert "listenBacklog: 128 (code: 4096)" in wrong_setting_defaults(
        readme.replace("`listenBacklog` (default 4096)", "`listenBacklog` (default 128)")
    )


# -- the bundled broker's admin paths: README's "The bundled broker" ------------------------
ADMIN_PATHS = {
    "_clock": "`/admin/v2/brokers/clock`",
    "_metrics": "`/metrics`",
    "_health": "`/admin/v2/brokers/health`",
    "_version": "`/admin/v2/brokers/version`",
    "_policy_get": "`…/{topic}/{policy}`",
    "_policy_post": "`…/{topic}/{policy}`",
    "_policy_delete": "`…/{topic}/{policy}`",
    "_topic_list": "`GET /admin/v2/persistent/{tenant}/{ns}`",
    "_stats": "`…/{topic}/stats`",
    "_internal_stats": "`…/{topic}/internalStats`",
    "_partitions": "`…/{topic}/partitions`",
    "_create_partitioned": "`…/{topic}/partitions` (PUT",
    "_create_subscription": "`PUT /admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{name}",
}
"""How README names each route of broker/admin/http.py's ROUTES, by its handler."""


def undocumented_routes(readme: str, routes: Sequence[Route] = ROUTES) -> list[str]:
    """Routes of the admin API README's "The bundled broker" does not name (or that this
    test does not know yet: a new route needs its README words and its line above)."""
    section = _between(readme, "## The bundled broker", "\n## ")
    problems = []
    for route in routes:
        name = route.handler.__name__
        if name not in ADMIN_PATHS:
            problems.append(f"{route.method} {route.path.pattern}: not in ADMIN_PATHS")
        elif ADMIN_PATHS[name] not in section:
            problems.append(f"{route.method} {route.path.pattern}")
    return problems


def test_every_admin_path_is_in_the_readme() -> None:
    assert undocumented_routes(_read("README.md")) == []


def test_an_admin_path_without_its_doc_is_caught() -> None:
    readme = _read("README.md")
    assert undocumented_routes(readme.replace("`/admin/v2/brokers/health`", "health")) == [
        "GET ^/admin/v2/brokers/health$"
    ]
    extra = Route("GET", re.compile("^/admin/v2/brokers/leader$"), lambda admin, request: (200, ""))
    assert undocumented_routes(readme, (*ROUTES, extra)) == [
        "GET ^/admin/v2/brokers/leader$: not in ADMIN_PATHS"
    ]


# -- the bench commands: README's table and `bench --help` ------------------------------------
def undocumented_commands(readme: str, usage: str, commands: Sequence[str]) -> list[str]:
    """`bench` commands (harness/cli.py COMMANDS) without a row in README's table or a line
    in `bench --help`."""
    table = _between(readme, "## The `bench` command", "\n## ")
    rows = set(re.findall(r"^\| `bench (\w+)", table, re.M))
    lines = set(re.findall(r"^  (\w+) ", _between(usage, "commands:", "options:"), re.M))
    return [f"README: {c}" for c in commands if c not in rows] + [
        f"bench --help: {c}" for c in commands if c not in lines
    ]


def test_every_bench_command_is_documented() -> None:
    assert undocumented_commands(_read("README.md"), USAGE, COMMANDS) == []


def test_a_command_without_its_row_is_caught() -> None:
    assert undocumented_commands(_read("README.md"), USAGE, (*COMMANDS, "profile")) == [
        "README: profile",
        "bench --help: profile",
    ]


# -- the top-level folders: README's "Layout" --------------------------------------------------
def unlisted_folders(readme: str, folders: set[str]) -> list[str]:
    """Top-level folders of the checkout (tracked ones) without a row in README's Layout."""
    rows = set(re.findall(r"^\| `(\w+)/` \|", _between(readme, "## Layout", "\n## "), re.M))
    return sorted(folders - rows)


def project_folders() -> set[str]:
    """The checkout's top-level folders that hold Python or YAML (not hidden ones, docs/)."""
    return {
        path.name
        for path in ROOT.iterdir()
        if path.is_dir()
        and not path.name.startswith((".", "_"))
        and path.name not in {"docs", "results", "data"}
        and not path.name.endswith(".egg-info")
        and any(path.glob("*.py")) | any(path.glob("*.yaml")) | any(path.glob("*/*.py"))
    }


def test_every_top_level_folder_is_in_the_layout() -> None:
    assert unlisted_folders(_read("README.md"), project_folders()) == []


def test_a_folder_without_its_row_is_caught() -> None:
    assert unlisted_folders(_read("README.md"), {*project_folders(), "tools"}) == ["tools"]


# -- the driver file's harness keys and embeddedBroker keys (docs/workloads.md) ----------------
def text_after(text: str, heading: str) -> str:
    """From `heading` to the end of its first table."""
    rest = text.split(heading, 1)[1]
    start = rest.index("\n|")
    end = rest.find("\n\n", start + 1)
    return rest[start : end if end >= 0 else None]


def driver_file_key_problems(text: str) -> list[str]:
    harness = set(re.findall(r"^\| `(\w+)` \|", text_after(text, "keys are the harness's"), re.M))
    embedded = set(
        re.findall(r"^\| `embeddedBroker\.(\w+)` \|", text_after(text, "### Peer brokers"), re.M)
    )
    return [
        *(f"harness key {k}" for k in sorted(set(HARNESS_KEYS) ^ harness)),
        *(f"embeddedBroker.{k}" for k in sorted(set(EMBEDDED_BROKER_KEYS) ^ embedded)),
    ]


def test_the_driver_files_harness_keys_are_documented() -> None:
    assert driver_file_key_problems(_read("docs/workloads.md")) == []


def test_a_driver_file_key_without_its_row_is_caught() -> None:
    text = _read("docs/workloads.md")
    row = next(ln for ln in text.splitlines() if ln.startswith("| `embeddedBroker.adminUrl`"))
    before = driver_file_key_problems(text)
    after = driver_file_key_problems(text.replace(row + "\n", ""))
    assert sorted(set(after) - set(before)) == ["embeddedBroker.adminUrl"]


# -- shipped workloads (docs/workloads.md) ----------------------------------------------------
def workload_table_problems(text: str) -> list[str]:
    """Workload files missing from the "Shipped workloads" table, or listed but absent."""
    table = text_after(text, "## Shipped workloads")
    listed = set(re.findall(r"`(workloads/[\w.-]+\.yaml)`", table))
    shipped = {f"workloads/{p.name}" for p in (ROOT / "workloads").glob("*.yaml")}
    return sorted(shipped ^ listed)


def test_every_shipped_workload_is_in_the_table() -> None:
    assert workload_table_problems(_read("docs/workloads.md")) == []


def test_a_workload_without_its_row_is_caught() -> None:
    text = _read("docs/workloads.md")
    row = next(ln for ln in text.splitlines() if ln.startswith("| `workloads/ci-gate.yaml`"))
    before = workload_table_problems(text)
    after = workload_table_problems(text.replace(row + "\n", ""))
    assert sorted(set(after) - set(before)) == ["workloads/ci-gate.yaml"]


# -- the results folder (docs/results.md and README's trees) ----------------------------------
NOT_IN_A_RUN = {
    paths.SWEEP_FILE,
    paths.SWEEP_SUMMARY_FILE,
    paths.GATE_JUNIT_FILE,
    paths.GATE_MARKDOWN_FILE,
}
"""Names results_contract spells that are not in a run's folder: a sweep's, the gate's."""


def results_names() -> set[str]:
    """Every file and folder name results_contract spells (constants named *_FILE, *_DIR,
    *_LOG, *_PATTERN in any of its modules), as the trees show them: `stats-<n>.json`."""
    names: set[str] = set()
    for module in pkgutil.iter_modules(results_contract.__path__):
        values = vars(importlib.import_module(f"results_contract.{module.name}"))
        for constant, value in values.items():
            if constant.isupper() and constant.endswith(("_FILE", "_DIR", "_LOG", "_PATTERN")):
                if isinstance(value, str | PurePath):
                    names.update(PurePath(value).parts)
    return {name.replace("*", "<n>") for name in names}


def missing_from_tree(tree: str) -> list[str]:
    """Names of a run's folder the tree does not show (as a whole path component)."""
    return sorted(
        name
        for name in results_names() - NOT_IN_A_RUN
        if not re.search(rf"(?<![\w.<>-]){re.escape(name)}(?![\w.<>-])", tree)
    )


def test_the_results_trees_show_every_file_a_run_writes() -> None:
    results = _read("docs/results.md")
    assert missing_from_tree(_between(results, "```\nresults/<run-id>/", "```")) == []
    assert missing_from_tree(_between(_read("README.md"), "```\nresults/<run-id>/", "```")) == []
    assert sorted(NOT_IN_A_RUN - _named(results)) == []


def test_a_file_without_its_tree_line_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _between(_read("docs/results.md"), "```\nresults/<run-id>/", "```")
    assert missing_from_tree(tree.replace("  raw/<worker-id>/bursts.csv\n", "")) == ["bursts.csv"]
    monkeypatch.setattr(paths, "NEW_FILE", "new.json", raising=False)
    assert missing_from_tree(tree) == ["new.json"]


# -- results_contract's modules (docs/results.md's table) ------------------------------------
def unlisted_contract_modules(text: str) -> list[str]:
    """Modules of results_contract/ without a row in docs/results.md's module table."""
    rows = set(re.findall(r"^\| `(results_contract/\w+\.py)` \|", text, re.M))
    modules = {
        f"results_contract/{m.name}.py" for m in pkgutil.iter_modules(results_contract.__path__)
    }
    return sorted(modules - rows)


def test_every_contract_module_has_its_row() -> None:
    assert unlisted_contract_modules(_read("docs/results.md")) == []


def test_a_module_without_its_row_is_caught() -> None:
    text = _read("docs/results.md")
    row = next(ln for ln in text.splitlines() if ln.startswith("| `results_contract/testbed.py`"))
    assert unlisted_contract_modules(text.replace(row, "")) == ["results_contract/testbed.py"]


# -- the raw CSV files' columns (docs/results.md, a section per file) -------------------------
COLUMN_FILES = {
    "CONNECTION_COLUMNS": paths.CONNECTIONS_FILE,
    "TIMELINE_COLUMNS": paths.TIMELINE_FILE,
    "STAGE_COLUMNS": paths.STAGES_FILE,
    "DELIVERY_COLUMNS": paths.DELIVERIES_FILE,
    "BURST_COLUMNS": paths.BURSTS_FILE,
    "BROKER_PROCESS_COLUMNS": paths.BROKER_PROCESS_FILE,
    "MACHINE_SPEED_COLUMNS": paths.MACHINE_SPEED_FILE,
}
"""The file of each column list of results_contract/columns.py."""


def column_problems(text: str, tables: Mapping[str, Mapping[str, object]]) -> list[str]:
    """Columns the section of their file does not name, in header order, in its code spans."""
    problems = []
    for constant, header in tables.items():
        if constant not in COLUMN_FILES:
            problems.append(f"{constant}: not in COLUMN_FILES")
            continue
        heading = next(
            (
                ln
                for ln in text.splitlines()
                if ln.startswith("## ") and ln.endswith(COLUMN_FILES[constant])
            ),
            None,
        )
        if heading is None:
            problems.append(f"{COLUMN_FILES[constant]}: no section")
            continue
        spans = re.findall(r"`([^`\n]+)`", _between(text, heading, "\n## "))
        named = iter(token for span in spans for token in span.split(","))
        missing = [column for column in header if column not in named]  # in order
        problems += [f"{COLUMN_FILES[constant]}: {column}" for column in missing]
    return problems


def test_every_raw_column_is_documented_in_order() -> None:
    assert column_problems(_read("docs/results.md"), COLUMNS) == []


def test_a_column_without_its_doc_is_caught() -> None:
    text = _read("docs/results.md")
    row = next(ln for ln in text.splitlines() if ln.startswith("| `wait_ms`"))
    assert column_problems(text.replace(row + "\n", ""), COLUMNS) == ["bursts.csv: wait_ms"]
    added = {**COLUMNS, "BURST_COLUMNS": {**columns.BURST_COLUMNS, "steal_ms": None}}
    assert column_problems(text, added) == ["bursts.csv: steal_ms"]
    assert column_problems(text, {"QUEUE_COLUMNS": {}}) == ["QUEUE_COLUMNS: not in COLUMN_FILES"]


# -- the metric names (docs/results.md, the histogram log's tags) -----------------------------
def metric_tag_problems(text: str, metrics: Sequence[str]) -> list[str]:
    """Tags (results_contract/metrics.py METRICS) missing from the histograms.hlog section's
    list, or listed there but not a tag, or out of order."""
    section = _between(text, "Tags are the metric names", ". Only")
    listed = re.findall(r"`([\w.]+)`", section)
    return [] if listed == list(metrics) else [f"listed {listed}, code {list(metrics)}"]


def test_every_metric_tag_is_documented_in_order() -> None:
    assert metric_tag_problems(_read("docs/results.md"), metrics.METRICS) == []


def test_a_tag_without_its_doc_is_caught() -> None:
    text = _read("docs/results.md")
    assert metric_tag_problems(text, (*metrics.METRICS, "ack")) != []
    assert metric_tag_problems(
        text.replace("`client_delay`, `publish`", "`publish`"), metrics.METRICS
    )


# -- summary.json's keys (docs/results.md; OMB's closed loops in docs/workloads.md) -----------
def summary_keys() -> dict[str, list[str]]:
    """Every key results_contract/summary.py spells, by its StrEnum."""
    return {
        name: [member.value for member in value]
        for name, value in vars(summary).items()
        if isinstance(value, type) and issubclass(value, StrEnum) and value is not StrEnum
    }


def undocumented_summary_keys(*pages: str) -> list[str]:
    """summary.json keys no page names, as a JSON key or inside a code span (`a.b.c`)."""
    named: set[str] = set()
    for text in pages:
        named.update(re.findall(r'"(\w+)"\s*:', text))
        for span in _named(text):
            named.update(re.split(r"[.\s,/()\[\]]+", span))
    return [
        f"{enum}.{key}" for enum, keys in summary_keys().items() for key in keys if key not in named
    ]


def test_every_summary_key_is_documented() -> None:
    assert undocumented_summary_keys(_read("docs/results.md"), _read("docs/workloads.md")) == []


def test_a_summary_key_without_its_doc_is_caught() -> None:
    results, workloads = _read("docs/results.md"), _read("docs/workloads.md")
    assert undocumented_summary_keys(results.replace("`burst_wait`", "burst wait"), workloads) == [
        "ClientBound.burst_wait"
    ]


# -- the gate's metrics (docs/reports.md) -----------------------------------------------------
def gate_metric_problems(text: str) -> list[str]:
    """Gate metrics the "Metric names" paragraph lacks or names wrongly, and default rules
    the "Default rules" table lacks, lists wrongly or gives another threshold."""
    paragraph = _between(text, "Metric names:", "\n\n")
    named = _named(paragraph)
    if "stage_<stage>_p99_ms" in named:
        named = (named - {"stage_<stage>_p99_ms"}) | {f"stage_{s}_p99_ms" for s in STAGES}
    known = {*METRICS, *DERIVED, *EXACT_METRICS}
    problems = [f"metric {m}" for m in sorted(known ^ named)]
    rows = re.findall(
        r"^\| (`.+?) \| [^|]+ \| ([^|]+) \|$", text_after(text, "### Default rules"), re.M
    )
    thresholds = {m: threshold for cells, threshold in rows for m in re.findall(r"`(\w+)`", cells)}
    for rule in DEFAULT_RULES:
        shown = thresholds.pop(rule.metric, None)
        if shown is None:
            problems.append(f"default rule {rule.metric}")
        elif rule.relative is not None and not shown.startswith(f"{rule.relative * 100:g} %"):
            problems.append(f"default rule {rule.metric}: {shown.strip()}")
    problems += [f"default rule {m}: not in the gate" for m in sorted(thresholds)]
    return problems


def test_the_gates_metrics_and_default_rules_are_documented() -> None:
    assert gate_metric_problems(_read("docs/reports.md")) == []


def test_a_gate_metric_without_its_doc_is_caught() -> None:
    text = _read("docs/reports.md")
    assert gate_metric_problems(re.sub(r"`client_max_cpu`,\s+", "", text)) == [
        "metric client_max_cpu"
    ]
    row = next(ln for ln in text.splitlines() if ln.startswith("| `publish_p99_ms`"))
    assert gate_metric_problems(text.replace(row + "\n", "")) == ["default rule publish_p99_ms"]
    assert gate_metric_problems(text.replace(row, row.replace("10 %", "20 %"))) == [
        "default rule publish_p99_ms: 20 %"
    ]


# -- the client-bound rules (docs/analysis.md, docs/results.md) -------------------------------
def code_rule_names() -> list[str]:
    """The rules as `rules_broken` names them, in the order the analysis judges them."""
    tree = ast.parse(_read("spark_analysis/client_bound.py"))
    return list(
        dict.fromkeys(
            str(node.args[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "append"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "broken"
            and isinstance(node.args[0], ast.Constant)
        )
    )


def client_bound_problems(analysis: str, results: str) -> list[str]:
    """The rules and limits of results_contract/client_bound.py against docs/analysis.md's
    "Client bound" paragraph (each rule by name, in order; each limit by name and value) and
    docs/results.md's numbered rules and `rules_broken` row."""
    paragraph = _between(analysis, "**Client bound**", "\n\n**")
    problems = []
    names = code_rule_names()
    listed = re.findall(r"^\d+\. \*\*(\w+)\*\*", paragraph, re.M)
    if listed != names:
        problems.append(f"analysis.md rules {listed}, code {names}")
    numbered = re.findall(
        r"^(\d+)\. \*\*", _between(results, "### Client-bound flag", "\n| field"), re.M
    )
    if len(numbered) != len(names):
        problems.append(f"results.md numbers {len(numbered)} rules, code has {len(names)}")
    row = next((ln for ln in results.splitlines() if ln.startswith("| `rules_broken`")), "")
    if re.findall(r"`(\w+)`", row.split("|")[2] if row else "") != names:
        problems.append("results.md's rules_broken row")
    for name, value in vars(client_bound).items():
        if not name.isupper() or isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            shown = re.search(rf"`{name}`\W{{1,3}}([\d.]+)", paragraph)
            if shown is None or float(shown.group(1)) != value:
                problems.append(f"{name} = {value}")
        elif f"`{name}`" not in paragraph:
            problems.append(name)
    return problems


def test_the_client_bound_rules_are_documented() -> None:
    assert code_rule_names() == ["distortion", "cpu", "loop_lag", "burst_cpu"]
    assert client_bound_problems(_read("docs/analysis.md"), _read("docs/results.md")) == []


def test_a_client_bound_rule_or_limit_without_its_doc_is_caught() -> None:
    analysis, results = _read("docs/analysis.md"), _read("docs/results.md")
    rule4 = _between(analysis, "4. **burst_cpu**", "\n\n")
    assert client_bound_problems(analysis.replace("4. **burst_cpu**" + rule4, ""), results)[0] == (
        "analysis.md rules ['distortion', 'cpu', 'loop_lag'], code "
        "['distortion', 'cpu', 'loop_lag', 'burst_cpu']"
    )
    changed = analysis.replace("`LOOP_LAG_LIMIT_MS` (100.0 ms)", "`LOOP_LAG_LIMIT_MS` (50 ms)")
    assert client_bound_problems(changed, results) == ["LOOP_LAG_LIMIT_MS = 100.0"]
