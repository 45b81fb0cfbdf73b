"""The observe stage's Grafana dashboards (tools/dashboards.py and the grafana role's committed JSON).

Grafana is not installed here, so the dashboards are checked against Grafana's own dashboard schema through
grafana-foundation-sdk, Grafana Labs' types generated from that schema (the CUE kinds of the dashboard and of every
core panel and data source), on the Grafana 11.6 line. A dashboard is decoded into the SDK's models and:

- encoded back: a key the schema does not have is dropped by the models, so any key of ours missing from the
  round trip is a field unknown to Grafana's schema (and a value that comes back changed, one the schema rewrites);
- walked against the models' type annotations (the schema's types): every value of the right JSON type, every enum
  value one of the schema's, every nested object (transformations and links too) decoded and checked in turn;
- every panel's options and field config decoded by its panel plugin's schema and every query by Prometheus's
  (an unknown panel type or data source would pass through unchecked, so it fails here).

Then megaprov's own rules: fixed unique uids, one data source by uid, PromQL that only names the metric contract's
series and labels with balanced brackets, templating variables defined and used, panels that do not overlap, and the
committed files equal to the generator's output.
"""

from __future__ import annotations

import copy
import enum
import json
import re
import shutil
import subprocess
import sys
import types
import typing
from collections.abc import Iterator
from inspect import isclass
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from grafana_foundation_sdk.cog import variants as sdk_variants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.cog.runtime import UnknownDataquery, panelcfg_config
from grafana_foundation_sdk.models import dashboard as sdk_dashboard
from grafana_foundation_sdk.models import units as sdk_units

from tests.helpers.metrics import CONTRACT_METRICS
from tools import dashboards as gen

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "ansible_collections" / "megaprov" / "cluster" / "roles" / "grafana"
DASHBOARD_DIR = ROLE / "files" / "dashboards"
UIDS = {"megaprov-cluster", "megaprov-node", "megaprov-job"}
DATASOURCE = {"type": "prometheus", "uid": "megaprov-prometheus"}

# The metric contract: tests/helpers/metrics.py.
# Labels of those series: megaprov's (node, gpu, job and the info metrics'), node-exporter's own, ALERTS'.
CONTRACT_LABELS = {"node", "gpu", "job", "role", "mountpoint", "uuid", "name", "pci_bus_id", "xid"}
CONTRACT_LABELS |= {"mode", "cpu", "device", "fstype", "alertstate", "alertname", "severity"}
PROMQL_FUNCTIONS = {"sum", "avg", "max", "min", "count", "rate", "increase", "time", "vector", "scalar", "clamp_min"}
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset"}
GRAFANA_BUILTIN_VARIABLES = {"__rate_interval", "__interval", "__range"}
GRAFANA_UNITS = {value for name, value in vars(sdk_units).items() if not name.startswith("_") and isinstance(value, str)}

register_default_plugins()


# ---- Grafana's schema, through the SDK's models


def _plain(model: object) -> Any:
    return json.loads(JSONEncoder().encode(model))


def _is_model(value: object) -> bool:
    return type(value).__module__.startswith("grafana_foundation_sdk.models.")


def _unknown(given: Any, known: Any, path: str) -> list[str]:
    """Where ``given`` (our JSON) has what ``known`` (its round trip through the schema's models) lost or changed."""
    if isinstance(given, dict):
        if not isinstance(known, dict):
            return [f"{path}: an object where Grafana's schema has {known!r}"]
        problems = []
        for key, value in given.items():
            if key not in known:
                problems.append(f"{path}.{key}: not a field of Grafana's schema")
            else:
                problems += _unknown(value, known[key], f"{path}.{key}")
        return problems
    if isinstance(given, list):
        if not isinstance(known, list) or len(known) != len(given):
            return [f"{path}: the list came back as {known!r}"]
        return [problem for index, item in enumerate(given) for problem in _unknown(item, known[index], f"{path}[{index}]")]
    if given != known or type(given) is not type(known):
        return [f"{path}: {given!r} came back from Grafana's schema as {known!r}"]
    return []


def _walk(model: object, path: str) -> list[str]:
    """Every attribute of an SDK model against the type the schema gives it."""
    if isinstance(model, UnknownDataquery):
        return [f"{path}: a query of a data source type the schema does not know (not checked)"]
    hints = typing.get_type_hints(type(model))
    return [problem for name, hint in hints.items() for problem in _check(getattr(model, name), hint, f"{path}.{name}")]


def _check(value: Any, hint: Any, path: str) -> list[str]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is object:
        return _walk(value, path) if _is_model(value) else []
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return []
        arms = [arm for arm in args if arm is not type(None)]
        if _is_model(value):
            arms = [arm for arm in arms if arm is Any or arm is object or (isclass(arm) and isinstance(value, arm))] or arms
        results = [_check(value, arm, path) for arm in arms]
        return [] if any(not result for result in results) else min(results, key=len)
    if origin is typing.Literal:
        return [] if value in args else [f"{path}: {value!r} is not one of {args}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{path}: {value!r} is not a list"]
        return [problem for index, item in enumerate(value) for problem in _check(item, args[0], f"{path}[{index}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{path}: {value!r} is not an object"]
        return [problem for key, item in value.items() for problem in _check(key, args[0], path) + _check(item, args[1], f"{path}.{key}")]
    if isclass(hint) and issubclass(hint, enum.Enum):
        if isinstance(value, hint):
            return []
        allowed = [member.value for member in hint]
        if isinstance(value, bool) or value not in allowed:
            return [f"{path}: {value!r} is not one of {allowed} ({hint.__name__})"]
        return []
    if hint is bool:
        return [] if isinstance(value, bool) else [f"{path}: {value!r} is not a boolean"]
    if hint is int:
        return [] if isinstance(value, int) and not isinstance(value, bool) else [f"{path}: {value!r} is not an integer"]
    if hint is float:
        return [] if isinstance(value, int | float) and not isinstance(value, bool) else [f"{path}: {value!r} is not a number"]
    if hint is str:
        return [] if isinstance(value, str) else [f"{path}: {value!r} is not a string"]
    if isclass(hint) and hint.__module__.startswith("grafana_foundation_sdk.models."):
        if isinstance(value, hint):
            return _walk(value, path)
        if isinstance(value, dict):
            # kept as JSON by its parent's decoder (transformations, panel links): decode and check it here
            try:
                decoded = hint.from_json(value)
            except (AttributeError, KeyError, TypeError, ValueError) as error:
                return [f"{path}: {value!r} does not decode as {hint.__name__}: {error!r}"]
            return _unknown(value, _plain(decoded), path) + _walk(decoded, path)
        return [f"{path}: {value!r} is not a {hint.__name__} object"]
    if isclass(hint) and issubclass(hint, sdk_variants.Dataquery):
        return _walk(value, path) if isinstance(value, hint) else [f"{path}: {value!r} is not a query"]
    return [f"{path}: no check for the annotation {hint!r}"]  # never accept what the checker does not understand


def schema_problems(data: dict[str, Any]) -> list[str]:
    """What in a dashboard's JSON model Grafana's dashboard schema does not allow (empty: nothing)."""
    try:
        model = sdk_dashboard.Dashboard.from_json(data)
    except (AttributeError, KeyError, TypeError, ValueError) as error:
        return [f"dashboard: does not decode as Grafana's dashboard: {error!r}"]
    problems = _unknown(data, _plain(model), "dashboard") + _walk(model, "dashboard")
    for index, panel in enumerate(model.panels or []):
        if isinstance(panel, sdk_dashboard.RowPanel):
            continue
        config = panelcfg_config(panel.type_val)
        if config is None or config.options_from_json_hook is None:
            problems.append(f"dashboard.panels[{index}]: panel type {panel.type_val!r} has no options schema (not checked)")
        elif isinstance(panel.options, dict):
            problems.append(f"dashboard.panels[{index}].options: not decoded by the {panel.type_val} schema")
    return problems


# ---- the dashboards


def _committed() -> dict[str, dict[str, Any]]:
    return {path.name: json.loads(path.read_text(encoding="utf-8")) for path in sorted(DASHBOARD_DIR.glob("*.json"))}


COMMITTED = _committed()
NAMES = sorted(COMMITTED)


def _panels(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in data["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row's


def _queries(data: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for panel in _panels(data):
        for target in panel.get("targets", []):
            yield panel["title"], target


def _exprs(data: dict[str, Any]) -> list[str]:
    return [target["expr"] for _, target in _queries(data)]


def test_the_committed_dashboards_are_the_three_with_fixed_uids():
    assert NAMES == sorted(f"{uid}.json" for uid in UIDS)
    uids = [data["uid"] for data in COMMITTED.values()]
    assert sorted(uids) == sorted(UIDS) and len(set(uids)) == len(uids)
    for name, data in COMMITTED.items():
        assert name == f"{data['uid']}.json"
        assert "id" not in data and "version" not in data  # Grafana assigns both to a provisioned dashboard


@pytest.mark.sync
def test_the_committed_files_are_the_generators_output():
    """A change to tools/dashboards.py without `python tools/gen-dashboards.py` fails here."""
    wanted = gen.rendered()
    assert set(wanted) == {path.name for path in DASHBOARD_DIR.glob("*.json")}
    for name, text in wanted.items():
        assert (DASHBOARD_DIR / name).read_text(encoding="utf-8") == text, f"{name}: run python tools/gen-dashboards.py"


def test_the_generator_is_pure():
    assert gen.dashboards() == gen.dashboards()
    assert gen.rendered() == gen.rendered()


@pytest.mark.parametrize("name", NAMES)
def test_grafanas_dashboard_schema_accepts_it(name):
    assert schema_problems(COMMITTED[name]) == []


@pytest.mark.parametrize("name", NAMES)
def test_the_schema_version_is_grafana_11_6s(name):
    # the SDK's 11.6 line writes the schema version Grafana 11.6 does
    assert COMMITTED[name]["schemaVersion"] == gen.SCHEMA_VERSION == sdk_dashboard.Dashboard().schema_version == 41


def _bad(mutate: typing.Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data = copy.deepcopy(COMMITTED["megaprov-cluster.json"])
    mutate(data)
    return data


def _first(data: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(panel for panel in data["panels"] if panel["type"] == kind)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d.update(sharedCrosshair=True), "dashboard.sharedCrosshair: not a field"),
        (lambda d: _first(d, "timeseries")["options"]["legend"].update(position="left"), ".options.legend.position: not a field"),
        (lambda d: _first(d, "timeseries")["fieldConfig"]["defaults"]["custom"].update(lineWidht=2), ".custom.lineWidht: not a field"),
        (lambda d: _first(d, "stat")["targets"][0].update(expression="up"), ".targets[0].expression: not a field"),
        (lambda d: _first(d, "table")["transformations"][0].update(option={}), ".transformations[0].option: not a field"),
        (lambda d: _first(d, "timeseries")["gridPos"].update(h="8"), ".grid_pos.h: '8' is not an integer"),
        (lambda d: _first(d, "stat")["options"].update(colorMode="purple"), "'purple' is not one of"),
        (lambda d: _first(d, "timeseries")["fieldConfig"]["defaults"]["custom"].update(drawStyle="spline"), "'spline' is not one of"),
        (lambda d: _first(d, "stat")["targets"][0].update(format="csv"), "'csv' is not one of"),
        (lambda d: d.update(graphTooltip=3), "3 is not one of"),
        (lambda d: d["templating"]["list"].append({"type": "query", "name": "x", "refresh": "never"}), "'never' is not one of"),
        (lambda d: _first(d, "stat").update(type="singlestat"), "panel type 'singlestat' has no options schema"),
        (lambda d: _first(d, "stat")["datasource"].update(type="influxdb"), "a query of a data source type the schema does not know"),
        (lambda d: d.update(tags="megaprov"), "'megaprov' is not a list"),
    ],
    ids=[
        "unknown-dashboard-field",
        "unknown-legend-option",
        "misspelt-custom-field",
        "unknown-query-field",
        "unknown-transformation-field",
        "ill-typed-grid",
        "bad-enum-option",
        "bad-draw-style",
        "bad-query-format",
        "bad-tooltip",
        "bad-variable-refresh",
        "unknown-panel-type",
        "unknown-datasource-type",
        "tags-not-a-list",
    ],
)
def test_the_schema_check_rejects_what_grafanas_schema_does_not_allow(mutate, expected):
    problems = schema_problems(_bad(mutate))
    assert any(expected in problem for problem in problems), problems


@pytest.mark.parametrize("name", NAMES)
def test_every_panel_and_query_uses_megaprovs_prometheus_by_uid(name):
    data = COMMITTED[name]
    for panel in _panels(data):
        if panel["type"] == "row":
            assert "datasource" not in panel and "targets" not in panel
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
    for title, target in _queries(data):
        assert target["datasource"] == DATASOURCE, title
    for variable in data["templating"]["list"]:
        assert variable["datasource"] == DATASOURCE, variable["name"]
    assert gen.datasource() == DATASOURCE


@pytest.mark.parametrize("name", NAMES)
def test_queries_have_unique_ref_ids_and_fit_their_panel(name):
    for panel in _panels(COMMITTED[name]):
        targets = panel.get("targets", [])
        assert len({t["refId"] for t in targets}) == len(targets), panel["title"]
        for target in targets:
            if panel["type"] == "timeseries":
                assert target["range"] and not target["instant"] and target["format"] == "time_series", panel["title"]
            else:  # one value per series: stats, gauges, tables
                assert target["instant"] and not target["range"], panel["title"]
            assert (target["format"] == "table") == (panel["type"] == "table"), panel["title"]


# ---- PromQL


def _strip_strings(expr: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)


def _balanced(expr: str) -> bool:
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    for char in _strip_strings(expr):
        if char in "([{":
            stack.append(char)
        elif char in pairs:
            if not stack or stack.pop() != pairs[char]:
                return False
    return not stack and expr.count('"') % 2 == 0


def promql_names(expr: str) -> tuple[set[str], set[str], set[str]]:
    """The metric names, label names and function names an expression uses (a lexer's view, not a parser's)."""
    text = _strip_strings(expr)
    labels: set[str] = set()
    for matchers in re.findall(r"\{([^{}]*)\}", text):
        for matcher in filter(None, (m.strip() for m in matchers.split(","))):
            match = re.fullmatch(r'([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*""', matcher)
            assert match, f"{expr}: label matcher {matcher!r}"
            labels.add(match.group(1))
    text = re.sub(r"\{[^{}]*\}", " ", text)
    for clause in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)", text):
        labels |= {label.strip() for label in clause.split(",") if label.strip()}
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range selectors
    text = re.sub(r"\$\{?\w+\}?", " ", text)  # Grafana variables
    text = re.sub(r"(?<![\w.])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?", " ", text)  # numbers
    functions = set(re.findall(r"([a-zA-Z_:][\w:]*)\s*(?=\()", text)) - PROMQL_KEYWORDS  # `and (...)`: an operand
    identifiers = set(re.findall(r"[a-zA-Z_:][\w:]*", text))
    metrics = identifiers - functions - PROMQL_KEYWORDS
    return metrics, labels, functions


@pytest.mark.parametrize("name", NAMES)
def test_promql_brackets_are_balanced(name):
    for expr in _exprs(COMMITTED[name]):
        assert _balanced(expr), expr


@pytest.mark.parametrize("name", NAMES)
def test_promql_names_only_the_metric_contract(name):
    for expr in _exprs(COMMITTED[name]):
        metrics, labels, functions = promql_names(expr)
        assert metrics, f"{expr}: no metric"
        assert metrics <= CONTRACT_METRICS, f"{expr}: {sorted(metrics - CONTRACT_METRICS)} not in the metric contract"
        assert labels <= CONTRACT_LABELS, f"{expr}: labels {sorted(labels - CONTRACT_LABELS)} not in the metric contract"
        assert functions <= PROMQL_FUNCTIONS, f"{expr}: functions {sorted(functions - PROMQL_FUNCTIONS)}"
    for variable in COMMITTED[name]["templating"]["list"]:
        match = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable["query"])
        assert match and match.group(1) in CONTRACT_METRICS and match.group(2) in CONTRACT_LABELS, variable["query"]


def test_the_promql_checks_catch_mistakes():
    assert not _balanced("sum(rate(up[5m])")
    assert not _balanced('max(up{node="a"))')
    assert not _balanced("sum(up]")
    assert _balanced('count(up{node="(x"})')  # a bracket inside a string is not one
    assert promql_names('sum by (node) (rate(node_cpu_seconds_total{mode!="idle"}[$__rate_interval])) / 2')[0] == {"node_cpu_seconds_total"}
    assert promql_names("megaprov_gpu_utilisation_ratio")[0] - CONTRACT_METRICS == {"megaprov_gpu_utilisation_ratio"}
    assert promql_names('up{instance="x"}')[1] == {"instance"}
    assert promql_names("a and on (node, gpu) b")[1] == {"node", "gpu"}


@pytest.mark.parametrize("name", NAMES)
def test_templating_variables_are_defined_and_used(name):
    data = COMMITTED[name]
    defined = {variable["name"] for variable in data["templating"]["list"]}
    used = set()
    for _, target in _queries(data):
        used |= {a or b for a, b in re.findall(r"\$(\w+)|\$\{(\w+)(?::\w+)?\}", target["expr"])}
    used -= GRAFANA_BUILTIN_VARIABLES
    assert used <= defined, f"used but not defined: {sorted(used - defined)}"
    assert defined <= used, f"defined but not used: {sorted(defined - used)}"


def test_the_node_and_job_variables():
    node = {v["name"]: v for v in COMMITTED["megaprov-node.json"]["templating"]["list"]}
    job = {v["name"]: v for v in COMMITTED["megaprov-job.json"]["templating"]["list"]}
    assert node["node"]["query"] == "label_values(megaprov_node_info, node)"
    assert job["job"]["query"] == "label_values(megaprov_job_iteration, job)"
    assert COMMITTED["megaprov-cluster.json"]["templating"]["list"] == []


def test_node_dashboard_queries_are_all_of_the_selected_node():
    for title, target in _queries(COMMITTED["megaprov-node.json"]):
        for metric in promql_names(target["expr"])[0]:
            assert re.search(rf'{metric}\{{[^}}]*node="\$node"', target["expr"]), f'{title}: {metric} without node="$node"'


def test_job_dashboard_queries_are_all_of_the_selected_job():
    for title, target in _queries(COMMITTED["megaprov-job.json"]):
        metrics = promql_names(target["expr"])[0]
        # DCGM's series carry the scrape job's name ("dcgm"): they are joined on (node, gpu) to the job's GPUs
        assert any(re.search(rf'{m}\{{[^}}]*job="\$job"', target["expr"]) for m in metrics), title
        for metric in metrics - {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"}:
            assert re.search(rf'{metric}\{{[^}}]*job="\$job"', target["expr"]), f'{title}: {metric} without job="$job"'


# ---- layout


@pytest.mark.parametrize("name", NAMES)
def test_panel_titles_are_unique(name):
    titles = [panel["title"] for panel in _panels(COMMITTED[name])]
    assert len(set(titles)) == len(titles), sorted(t for t in titles if titles.count(t) > 1)


@pytest.mark.parametrize("name", NAMES)
def test_panels_have_unique_ids_and_do_not_overlap(name):
    panels = list(_panels(COMMITTED[name]))
    ids = [panel["id"] for panel in panels]
    assert len(set(ids)) == len(ids)
    boxes = []
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] >= 0 and grid["y"] >= 0, panel["title"]
        assert grid["x"] + grid["w"] <= 24, f"{panel['title']}: wider than Grafana's 24 columns"
        boxes.append((panel["title"], grid["x"], grid["y"], grid["x"] + grid["w"], grid["y"] + grid["h"]))
    for i, (title_a, x0, y0, x1, y1) in enumerate(boxes):
        for title_b, u0, v0, u1, v1 in boxes[i + 1 :]:
            assert x1 <= u0 or u1 <= x0 or y1 <= v0 or v1 <= y0, f"{title_a!r} overlaps {title_b!r}"


def test_layout_refuses_a_panel_wider_than_the_grid():
    wide = gen.Panel("stat", "too wide", (gen.Query("up"),), w=25, h=4)
    with pytest.raises(ValueError, match="too wide"):
        gen.layout([gen.Row("r", (wide,))])


def test_layout_wraps_a_row_at_the_grids_width():
    panels = tuple(gen.Panel("stat", f"p{i}", (gen.Query("up"),), w=10, h=3 + i) for i in range(3))
    grids = [panel["gridPos"] for panel in gen.layout([gen.Row("r", panels)]) if isinstance(panel, dict)]
    assert grids == [
        {"h": 1, "w": 24, "x": 0, "y": 0},
        {"h": 3, "w": 10, "x": 0, "y": 1},
        {"h": 4, "w": 10, "x": 10, "y": 1},
        {"h": 5, "w": 10, "x": 0, "y": 5},
    ]


@pytest.mark.parametrize("name", NAMES)
def test_units_are_grafanas(name):
    for panel in _panels(COMMITTED[name]):
        if panel["type"] == "row":
            continue
        units = [panel["fieldConfig"]["defaults"]["unit"]]
        for override in panel["fieldConfig"]["overrides"]:
            units += [prop["value"] for prop in override["properties"] if prop["id"] == "unit"]
        assert set(units) <= GRAFANA_UNITS, f"{panel['title']}: {units}"


# ---- what each dashboard shows


def _by_title(name: str) -> dict[str, dict[str, Any]]:
    return {panel["title"]: panel for panel in _panels(COMMITTED[name])}


def _all_exprs(panel: dict[str, Any]) -> str:
    return "\n".join(target["expr"] for target in panel["targets"])


def test_the_cluster_dashboard():
    panels = _by_title("megaprov-cluster.json")
    assert "up" in promql_names(_all_exprs(panels["Nodes up / expected"]))[0]
    assert {"megaprov_gpu_info", "megaprov_node_gpus_expected"} <= promql_names(_all_exprs(panels["GPUs present / expected"]))[0]
    assert panels["Firing alerts"]["type"] == "table" and 'ALERTS{alertstate="firing"}' in _all_exprs(panels["Firing alerts"])
    jobs = panels["Running jobs"]
    assert jobs["type"] == "table"
    shown = {"megaprov_job_iteration", "megaprov_job_train_iterations", "megaprov_job_tokens_per_second", "megaprov_job_expected_tokens_per_second"}
    assert shown <= promql_names(_all_exprs(jobs))[0]
    organize = next(t for t in jobs["transformations"] if t["id"] == "organize")
    assert len(organize["options"]["renameByName"]) == len(jobs["targets"])  # every query's column named
    assert "megaprov_gpu_utilization_ratio" in _all_exprs(panels["GPU utilisation"])
    assert "megaprov_shared_dir_info" in _all_exprs(panels["Shared directory usage"])


def test_the_node_dashboard():
    panels = _by_title("megaprov-node.json")
    wanted = {
        "CPU": {"node_cpu_seconds_total"},
        "Memory": {"node_memory_MemAvailable_bytes", "node_memory_MemTotal_bytes"},
        "Network": {"node_network_receive_bytes_total", "node_network_transmit_bytes_total"},
        "GPU utilisation": {"megaprov_gpu_utilization_ratio"},
        "GPU memory used": {"megaprov_gpu_memory_used_bytes", "megaprov_gpu_memory_total_bytes"},
        "GPU temperature": {"megaprov_gpu_temperature_celsius"},
        "GPU power": {"megaprov_gpu_power_watts"},
        "Uncorrected ECC errors (volatile)": {"megaprov_gpu_ecc_errors_uncorrected_volatile_total"},
        "Xid errors": {"megaprov_gpu_xid_errors_total"},
    }
    for title, metrics in wanted.items():
        assert metrics <= promql_names(_all_exprs(panels[title]))[0], title


def test_the_job_dashboard():
    panels = _by_title("megaprov-job.json")
    assert "megaprov_job_loss" in _all_exprs(panels["Loss"])
    plan = promql_names(_all_exprs(panels["Tokens/s against plan"]))[0]
    assert plan == {"megaprov_job_tokens_per_second", "megaprov_job_expected_tokens_per_second", "megaprov_job_tokens_per_second_floor"}
    assert "megaprov_job_tflops_per_gpu" in _all_exprs(panels["TFLOP/s per GPU"])
    assert "megaprov_job_iteration_seconds" in _all_exprs(panels["Iteration time"])
    assert "megaprov_job_restarts_total" in _all_exprs(panels["Restarts"]) and "megaprov_job_restarts_total" in _all_exprs(
        panels["Restarts over time"]
    )
    age, limit = (target["expr"] for target in panels["Checkpoint age"]["targets"])
    assert age == 'max(megaprov_job_iteration{job="$job"}) - max(megaprov_job_checkpoint_iteration{job="$job"})'
    assert limit == '2 * max(megaprov_job_save_interval_iterations{job="$job"})'
    assert 'megaprov_gpu_utilization_ratio{job="$job"}' in _all_exprs(panels["GPU utilisation"])
    assert "megaprov_gpu_memory_used_bytes" in _all_exprs(panels["GPU memory used"])


# ---- the script and the provisioning files


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "gen-dashboards.py"), *args], capture_output=True, text=True, timeout=120)


@pytest.mark.sync
def test_gen_dashboards_check_passes_on_the_committed_files():
    proc = _script("--check")
    assert proc.returncode == 0, proc.stderr


def test_gen_dashboards_check_fails_on_a_stale_file_and_a_run_fixes_it(tmp_path):
    directory = tmp_path / "dashboards"
    shutil.copytree(DASHBOARD_DIR, directory)
    (directory / "megaprov-job.json").write_text("{}\n")
    (directory / "old.json").write_text("{}\n")
    proc = _script("--check", "--dir", str(directory))
    assert proc.returncode == 1
    assert "megaprov-job.json: differs" in proc.stderr and "old.json: not a generated dashboard" in proc.stderr
    assert _script("--dir", str(directory)).returncode == 0
    assert _script("--check", "--dir", str(directory)).returncode == 0
    assert sorted(p.name for p in directory.iterdir()) == NAMES


def test_the_datasource_template_provisions_prometheus_by_the_dashboards_uid():
    path = ROLE / "templates" / "datasource.yml.j2"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("{{ ansible_managed | comment }}\n")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["comment"] = lambda value: f"#\n# {value}\n#"
    rendered = env.from_string(text).render(
        ansible_managed="Ansible managed", grafana_prometheus_url="http://10.0.0.1:9090", grafana_prometheus_scrape_interval="15s"
    )
    (source,) = yaml.safe_load(rendered)["datasources"]
    assert source["uid"] == gen.DATASOURCE_UID and source["type"] == gen.DATASOURCE_TYPE
    assert source["url"] == "http://10.0.0.1:9090"
    assert source["access"] == "proxy"


def test_the_dashboard_provider_reads_the_provisioned_directory():
    provider_file = ROLE / "files" / "provisioning" / "dashboards" / "megaprov.yml"
    (provider,) = yaml.safe_load(provider_file.read_text(encoding="utf-8"))["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == gen.PROVISIONED_DIR == "/var/lib/grafana/dashboards/megaprov"
    assert provider["allowUiUpdates"] is False
