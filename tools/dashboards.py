"""Grafana dashboards of the observe stage, generated as data.

Grafana is not installed where megaprov is developed, so its dashboards are not drawn in Grafana's editor and
exported: they are built here, by pure functions, as the JSON model Grafana's file provisioning reads, and written
into the grafana role (``roles/grafana/files/dashboards/*.json``) by ``tools/gen-dashboards.py``. The committed files
are tested against Grafana's own dashboard schema (tests/tools/test_dashboards.py, through grafana-foundation-sdk's
models, which are generated from it) and against this output, so a change here is a change there only once it is
regenerated.

Three dashboards, each with a fixed uid (links and bookmarks survive a regeneration):

- ``megaprov-cluster``: nodes up against the scrape targets, GPUs present against expected, firing alerts, the
  running jobs (iteration of total, tokens/s against the plan), cluster GPU utilisation, the shared directory's usage;
- ``megaprov-node`` (variable ``$node``): CPU, memory, network, filesystems, and per GPU utilisation, memory,
  temperature, power, uncorrected ECC errors and Xids;
- ``megaprov-job`` (variable ``$job``): loss, tokens/s against expected and floor, TFLOP/s per GPU, iteration time,
  restarts, checkpoint age in iterations against twice the save interval, and the job's GPUs.

Every query goes to one Prometheus data source, by uid (:data:`DATASOURCE_UID`), which the grafana role provisions
(``templates/datasource.yml.j2``). The metric names are megaprov's metric contract: node-exporter's standard series
and megaprov's textfiles (``megaprov_node_*``, ``megaprov_gpu_*``, ``megaprov_job_*``, every series labelled
``node``; GPU and training series carry ``job``, the training job's name, through honor_labels), DCGM's
``DCGM_FI_*`` fields on sites with dcgm-exporter, and Prometheus's ``up`` and ``ALERTS``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias, TypedDict, Unpack

JsonValue: TypeAlias = "str | int | float | bool | None | list[JsonValue] | dict[str, JsonValue]"
JsonObject: TypeAlias = "dict[str, JsonValue]"

DATASOURCE_UID = "megaprov-prometheus"
DATASOURCE_TYPE = "prometheus"
# The dashboard JSON model's version that Grafana 11.6 writes (Grafana 10.x and 11.x load it; older models are
# migrated up on load, newer fields are ignored by older releases).
SCHEMA_VERSION = 41
# Where the grafana role puts the files and where its dashboard provider (files/provisioning/dashboards/megaprov.yml)
# reads them on the head.
PROVISIONED_DIR = "/var/lib/grafana/dashboards/megaprov"
TAG = "megaprov"

CLUSTER_UID = "megaprov-cluster"
NODE_UID = "megaprov-node"
JOB_UID = "megaprov-job"

GRID_WIDTH = 24  # Grafana's grid: 24 columns
PanelKind = Literal["timeseries", "stat", "gauge", "bargauge", "table"]
Step = tuple[float | None, str]  # a threshold: from this value (None: from minus infinity) on, this colour

# Scrape job of node-exporter (the textfiles ride on it); DCGM's is "dcgm" and needs no selector here.
NODE_JOB = 'job="node"'
# A training job is running: megaprov_job_running is 1 (the follower writes 0 once it has stopped).
RUNNING = "(max by (job) (megaprov_job_running) == 1)"


@dataclass(frozen=True)
class Query:
    """One PromQL query of a panel. ``instant``: one value per series at the end of the time range (stats, tables);
    ``table``: Prometheus's table format, a row per series with its labels as columns."""

    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False


@dataclass(frozen=True)
class Panel:
    """A panel, before layout: its width and height in grid units; ``options``, ``custom`` (the field config's
    panel-specific part) are merged over the kind's defaults."""

    kind: PanelKind
    title: str
    queries: tuple[Query, ...]
    w: int
    h: int
    description: str = ""
    unit: str = "short"
    min: float | None = None
    max: float | None = None
    decimals: int | None = None
    steps: tuple[Step, ...] = ((None, "green"),)
    mappings: tuple[tuple[int, str, str], ...] = ()  # (value, text, colour)
    options: JsonObject = field(default_factory=dict)
    custom: JsonObject = field(default_factory=dict)
    overrides: tuple[JsonObject, ...] = ()
    transformations: tuple[JsonObject, ...] = ()
    links: tuple[tuple[str, str], ...] = ()  # data links: (title, url)


@dataclass(frozen=True)
class Row:
    """A titled row of panels, laid out left to right and wrapped at the grid's width."""

    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Variable:
    """A query variable: the values of ``label`` on ``metric``'s series (one selected at a time)."""

    name: str
    label: str
    metric: str


# ---- building blocks


def datasource() -> JsonObject:
    return {"type": DATASOURCE_TYPE, "uid": DATASOURCE_UID}


def _target(query: Query, ref_id: str) -> JsonObject:
    target: JsonObject = {"datasource": datasource(), "refId": ref_id, "editorMode": "code", "expr": query.expr}
    if query.legend:
        target["legendFormat"] = query.legend
    target["range"] = not query.instant
    target["instant"] = query.instant
    target["format"] = "table" if query.table else "time_series"
    return target


def _thresholds(steps: Sequence[Step]) -> JsonObject:
    return {"mode": "absolute", "steps": [{"color": color, "value": value} for value, color in steps]}


def _mappings(mappings: Sequence[tuple[int, str, str]]) -> list[JsonValue]:
    if not mappings:
        return []
    options: JsonObject = {str(value): {"text": text, "color": color, "index": index} for index, (value, text, color) in enumerate(mappings)}
    return [{"type": "value", "options": options}]


def _reduce_last() -> JsonObject:
    return {"values": False, "calcs": ["lastNotNull"], "fields": ""}


def _legend(show: bool = True) -> JsonObject:
    return {"showLegend": show, "displayMode": "list", "placement": "bottom", "calcs": []}


def _default_options(kind: PanelKind) -> JsonObject:
    if kind == "timeseries":
        return {"legend": _legend(), "tooltip": {"mode": "multi", "sort": "desc"}}
    if kind == "stat":
        return {
            "reduceOptions": _reduce_last(),
            "orientation": "auto",
            "textMode": "auto",
            "wideLayout": True,
            "colorMode": "value",
            "graphMode": "none",
            "justifyMode": "auto",
            "showPercentChange": False,
            "percentChangeColorMode": "standard",
        }
    if kind == "gauge":
        return {
            "reduceOptions": _reduce_last(),
            "orientation": "auto",
            "showThresholdLabels": False,
            "showThresholdMarkers": True,
            "sizing": "auto",
            "minVizWidth": 75,
            "minVizHeight": 75,
        }
    if kind == "bargauge":
        return {
            "reduceOptions": _reduce_last(),
            "orientation": "horizontal",
            "displayMode": "gradient",
            "valueMode": "color",
            "namePlacement": "auto",
            "showUnfilled": True,
            "sizing": "auto",
            "minVizWidth": 8,
            "minVizHeight": 16,
            "maxVizHeight": 300,
            "legend": _legend(show=False),
        }
    return {"frameIndex": 0, "showHeader": True, "cellHeight": "sm", "footer": {"show": False, "reducer": ["sum"], "countRows": False}}


def _default_custom(kind: PanelKind) -> JsonObject:
    if kind == "timeseries":
        return {
            "drawStyle": "line",
            "lineInterpolation": "linear",
            "lineWidth": 1,
            "fillOpacity": 10,
            "gradientMode": "none",
            "showPoints": "never",
            "pointSize": 4,
            "spanNulls": False,
            "axisPlacement": "auto",
            "axisLabel": "",
            "stacking": {"mode": "none", "group": "A"},
        }
    if kind == "table":
        return {"align": "auto", "cellOptions": {"type": "auto"}, "inspect": False}
    return {}


def _panel(panel: Panel, panel_id: int, x: int, y: int) -> JsonObject:
    defaults: JsonObject = {"unit": panel.unit}
    if panel.decimals is not None:
        defaults["decimals"] = panel.decimals
    if panel.min is not None:
        defaults["min"] = panel.min
    if panel.max is not None:
        defaults["max"] = panel.max
    defaults["color"] = {"mode": "palette-classic" if panel.kind == "timeseries" else "thresholds"}
    defaults["thresholds"] = _thresholds(panel.steps)
    defaults["mappings"] = _mappings(panel.mappings)
    if panel.links:
        defaults["links"] = [{"title": title, "url": url} for title, url in panel.links]
    custom = {**_default_custom(panel.kind), **panel.custom}
    if custom:
        defaults["custom"] = custom
    out: JsonObject = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": datasource(),
        "gridPos": {"h": panel.h, "w": panel.w, "x": x, "y": y},
        "targets": [_target(query, _ref_id(index)) for index, query in enumerate(panel.queries)],
        "fieldConfig": {"defaults": defaults, "overrides": list(panel.overrides)},
        "options": {**_default_options(panel.kind), **panel.options},
    }
    if panel.transformations:
        out["transformations"] = list(panel.transformations)
    return out


def _ref_id(index: int) -> str:
    return chr(ord("A") + index)


def _row(title: str, panel_id: int, y: int) -> JsonObject:
    return {"id": panel_id, "type": "row", "title": title, "collapsed": False, "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y}, "panels": []}


def layout(rows: Sequence[Row]) -> list[JsonValue]:
    """The panels of ``rows`` with ids (from 1) and grid positions: each row's header, then its panels left to right,
    wrapped to a new line at the grid's width."""
    out: list[JsonValue] = []
    y = 0
    panel_id = 0
    for row in rows:
        panel_id += 1
        out.append(_row(row.title, panel_id, y))
        y += 1
        x = 0
        line_height = 0
        for panel in row.panels:
            if not 0 < panel.w <= GRID_WIDTH or panel.h <= 0:
                raise ValueError(f"panel {panel.title!r}: width {panel.w}, height {panel.h} do not fit a grid {GRID_WIDTH} wide")
            if x + panel.w > GRID_WIDTH:
                y += line_height
                x = 0
                line_height = 0
            panel_id += 1
            out.append(_panel(panel, panel_id, x, y))
            x += panel.w
            line_height = max(line_height, panel.h)
        y += line_height
    return out


def _variable(variable: Variable) -> JsonObject:
    return {
        "type": "query",
        "name": variable.name,
        "label": variable.label,
        "datasource": datasource(),
        "query": f"label_values({variable.metric}, {variable.name})",
        "refresh": 2,  # on time range change: nodes and jobs that appeared since the dashboard was opened
        "sort": 1,  # alphabetical
        "multi": False,
        "includeAll": False,
        "hide": 0,
    }


def dashboard(uid: str, title: str, description: str, rows: Sequence[Row], variables: Sequence[Variable] = ()) -> JsonObject:
    """The JSON model of one dashboard, as Grafana's file provisioning reads it (no ``id``, no ``version``: Grafana
    assigns both)."""
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": [TAG],
        "editable": False,  # generated: change tools/dashboards.py and regenerate
        "graphTooltip": 1,  # shared crosshair
        "timezone": "browser",
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "schemaVersion": SCHEMA_VERSION,
        "links": [
            {
                "title": "megaprov",
                "type": "dashboards",
                "tags": [TAG],
                "asDropdown": True,
                "icon": "external link",
                "tooltip": "",
                "includeVars": False,
                "keepTime": True,
                "targetBlank": False,
            }
        ],
        "annotations": {"list": []},
        "templating": {"list": [_variable(variable) for variable in variables]},
        "panels": layout(rows),
    }


# ---- panel shorthands


class _Extras(TypedDict, total=False):
    """The optional fields of a :class:`Panel`, for the shorthands."""

    description: str
    unit: str
    min: float
    max: float
    decimals: int
    steps: tuple[Step, ...]
    mappings: tuple[tuple[int, str, str], ...]
    options: JsonObject
    custom: JsonObject
    overrides: tuple[JsonObject, ...]


def _stat(title: str, *queries: Query, w: int, **extras: Unpack[_Extras]) -> Panel:
    return Panel("stat", title, queries, w=w, h=4, **extras)


def _series(title: str, *queries: Query, w: int = 12, h: int = 8, **extras: Unpack[_Extras]) -> Panel:
    return Panel("timeseries", title, queries, w=w, h=h, **extras)


def _instant(expr: str, legend: str = "") -> Query:
    return Query(expr, legend, instant=True)


def _row_of(expr: str) -> Query:
    return Query(expr, instant=True, table=True)


def _dashed(name: str, color: str) -> JsonObject:
    """A field override: the series named ``name`` drawn dashed, in ``color`` (a plan, a floor, a limit)."""
    return {
        "matcher": {"id": "byName", "options": name},
        "properties": [
            {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
            {"id": "color", "value": {"mode": "fixed", "fixedColor": color}},
        ],
    }


def _column(name: str, *properties: tuple[str, JsonValue]) -> JsonObject:
    """A field override: properties of one table column, by its (renamed) name."""
    return {"matcher": {"id": "byName", "options": name}, "properties": [{"id": key, "value": value} for key, value in properties]}


def _merge_and_name(names: Sequence[str], hide: Sequence[str] = ("Time",)) -> tuple[JsonObject, ...]:
    """Transformations of a table of several instant queries: one row per shared label set (merge), each query's
    value column renamed (``Value #A`` is query A's) and the time column hidden."""
    rename: JsonObject = {f"Value #{_ref_id(index)}": name for index, name in enumerate(names)}
    exclude: JsonObject = {column: True for column in hide}
    return (
        {"id": "merge", "options": {}},
        {"id": "organize", "options": {"excludeByName": exclude, "renameByName": rename, "indexByName": {}}},
    )


RED_FROM_ONE: tuple[Step, ...] = ((None, "green"), (1, "red"))
ORANGE_FROM_ONE: tuple[Step, ...] = ((None, "green"), (1, "orange"))
USAGE: tuple[Step, ...] = ((None, "green"), (0.8, "orange"), (0.9, "red"))


# ---- the cluster


def _running(metric_expr: str) -> str:
    """``metric_expr`` (one series per job) for the running jobs only."""
    return f"{metric_expr} and on (job) {RUNNING}"


def cluster_dashboard() -> JsonObject:
    shared_avail = "max by (node, mountpoint) (node_filesystem_avail_bytes and on (node, mountpoint) megaprov_shared_dir_info)"
    shared_size = "max by (node, mountpoint) (node_filesystem_size_bytes and on (node, mountpoint) megaprov_shared_dir_info)"
    job_link = ("Job dashboard", f"/d/{JOB_UID}?var-job=${{__data.fields.job}}&${{__url_time_range}}")
    node_link = ("Node dashboard", f"/d/{NODE_UID}?var-node=${{__data.fields.node}}&${{__url_time_range}}")
    overview = Row(
        "Overview",
        (
            _stat(
                "Nodes up / expected",
                _instant(f"sum(up{{{NODE_JOB}}})", "up"),
                _instant(f"count(up{{{NODE_JOB}}})", "expected"),
                w=4,
                description="node-exporter targets answering Prometheus's scrape, of all the targets (every node of the inventory).",
                options={"textMode": "value_and_name"},
            ),
            _stat(
                "Nodes down",
                _instant(f"count(up{{{NODE_JOB}}} == 0) or vector(0)"),
                w=4,
                description="node-exporter targets that did not answer the last scrape.",
                steps=RED_FROM_ONE,
            ),
            _stat(
                "GPUs present / expected",
                _instant("count(megaprov_gpu_info) or vector(0)", "present"),
                _instant("sum(megaprov_node_gpus_expected)", "expected"),
                w=4,
                description="GPUs the GPU collector sees, of those the nodes' preflight facts expect (nodes that answer).",
                options={"textMode": "value_and_name"},
            ),
            _stat(
                "GPUs missing",
                _instant("clamp_min(sum(megaprov_node_gpus_expected) - (count(megaprov_gpu_info) or vector(0)), 0)"),
                w=4,
                description="GPUs expected on the nodes that answer but not seen (the GpuMissing alert names the node).",
                steps=RED_FROM_ONE,
            ),
            _stat(
                "Alerts firing",
                _instant('count(ALERTS{alertstate="firing"}) or vector(0)'),
                w=4,
                steps=ORANGE_FROM_ONE,
            ),
            _stat(
                "Jobs running",
                _instant("count(max by (job) (megaprov_job_running) == 1) or vector(0)"),
                w=4,
                description="Training jobs whose follower reports them running.",
            ),
        ),
    )
    nodes_and_alerts = Row(
        "Nodes and alerts",
        (
            Panel(
                "table",
                "Nodes",
                (
                    _row_of(f"max by (node) (up{{{NODE_JOB}}})"),
                    _row_of("count by (node) (megaprov_gpu_info)"),
                    _row_of("max by (node) (megaprov_node_gpus_expected)"),
                ),
                w=10,
                h=8,
                description="Each node: whether node-exporter answers, its GPUs seen and expected. A row links to the node's dashboard.",
                transformations=_merge_and_name(("Up", "GPUs", "GPUs expected")),
                overrides=(_column("Up", ("mappings", _mappings(((1, "up", "green"), (0, "down", "red"))))),),
                links=(node_link,),
                options={"sortBy": [{"displayName": "node", "desc": False}]},
            ),
            Panel(
                "table",
                "Firing alerts",
                (_row_of('ALERTS{alertstate="firing"}'),),
                w=14,
                h=8,
                description="Alerts of megaprov's rules that are firing now, with their labels.",
                transformations=(
                    {
                        "id": "organize",
                        "options": {
                            "excludeByName": {"Time": True, "Value": True, "__name__": True, "alertstate": True},
                            "renameByName": {},
                            "indexByName": {"alertname": 0, "severity": 1, "node": 2},
                        },
                    },
                ),
            ),
        ),
    )
    training = Row(
        "Training",
        (
            Panel(
                "table",
                "Running jobs",
                (
                    _row_of(_running("max by (job) (megaprov_job_iteration)")),
                    _row_of(_running("max by (job) (megaprov_job_train_iterations)")),
                    _row_of(_running("max by (job) (megaprov_job_iteration) / max by (job) (megaprov_job_train_iterations)")),
                    _row_of(_running("max by (job) (megaprov_job_tokens_per_second)")),
                    _row_of(_running("max by (job) (megaprov_job_expected_tokens_per_second)")),
                    _row_of(_running("max by (job) (megaprov_job_tokens_per_second) / max by (job) (megaprov_job_expected_tokens_per_second)")),
                    _row_of(_running("time() - max by (job) (megaprov_job_last_progress_timestamp_seconds)")),
                ),
                w=24,
                h=7,
                description="Each running job: its iteration of the total, its tokens/s against the plan. A row links to the job's dashboard.",
                transformations=_merge_and_name(("Iteration", "Iterations", "Progress", "Tokens/s", "Planned tokens/s", "Of plan", "Since progress")),
                overrides=(
                    _column("Progress", ("unit", "percentunit"), ("decimals", 1)),
                    _column("Of plan", ("unit", "percentunit"), ("decimals", 0)),
                    _column("Since progress", ("unit", "s")),
                ),
                links=(job_link,),
                options={"sortBy": [{"displayName": "job", "desc": False}]},
            ),
        ),
    )
    utilisation = Row(
        "Utilisation",
        (
            _series(
                "GPU utilisation",
                Query("avg(megaprov_gpu_utilization_ratio)", "cluster"),
                Query("avg by (node) (megaprov_gpu_utilization_ratio)", "{{node}}"),
                Query("avg(DCGM_FI_DEV_GPU_UTIL) / 100", "cluster (DCGM)"),
                description="Mean GPU utilisation (nvidia-smi's, from the GPU collector), by node; DCGM's where dcgm-exporter runs.",
                unit="percentunit",
                min=0,
                max=1,
            ),
            _series(
                "Tensor core and DRAM activity (DCGM)",
                Query("avg(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)", "tensor pipe active"),
                Query("avg(DCGM_FI_PROF_DRAM_ACTIVE)", "DRAM active"),
                description="Cluster means of DCGM's profiling fields: how busy the tensor pipes and device memory are. Empty without dcgm-exporter.",
                unit="percentunit",
                min=0,
                max=1,
            ),
            Panel(
                "bargauge",
                "Shared directory usage",
                (_instant(f"1 - {shared_avail} / {shared_size}", "{{node}}: {{mountpoint}}"),),
                w=12,
                h=8,
                description="Used share of the filesystem holding the cluster's shared directory, as each node sees it mounted.",
                unit="percentunit",
                min=0,
                max=1,
                steps=USAGE,
            ),
            _series(
                "Shared directory free space",
                Query(f"min by (mountpoint) ({shared_avail})", "{{mountpoint}}"),
                description="Free bytes on the shared directory's filesystem (the least any node reports).",
                unit="bytes",
                min=0,
            ),
        ),
    )
    return dashboard(
        CLUSTER_UID,
        "megaprov / Cluster",
        "The megaprov cluster at a glance: nodes, GPUs, alerts, running training jobs, utilisation and shared storage.",
        (overview, nodes_and_alerts, training, utilisation),
    )


# ---- one node


def node_dashboard() -> JsonObject:
    on_node = 'node="$node"'
    gpu_legend = "GPU {{gpu}}"
    fs = f'{on_node}, fstype!~"tmpfs|overlay|squashfs|ramfs|nsfs"'

    def per_gpu(metric: str) -> str:
        # one series per GPU, whether or not a training job (the job label) was on it
        return f"max by (gpu) ({metric}{{{on_node}}})"

    summary = Row(
        "Node",
        (
            _stat(
                "State",
                _instant(f"max(up{{{NODE_JOB}, {on_node}}})"),
                w=4,
                description="Whether node-exporter on the node answered the last scrape.",
                mappings=((1, "up", "green"), (0, "down", "red")),
            ),
            _stat(
                "Role",
                _instant(f"max by (role) (megaprov_node_info{{{on_node}}})", "{{role}}"),
                w=4,
                options={"textMode": "name", "colorMode": "none"},
            ),
            _stat(
                "GPUs present / expected",
                _instant(f"count(megaprov_gpu_info{{{on_node}}}) or vector(0)", "present"),
                _instant(f"max(megaprov_node_gpus_expected{{{on_node}}})", "expected"),
                w=4,
                options={"textMode": "value_and_name"},
            ),
            _stat(
                "Uncorrected ECC errors",
                _instant(f"sum(megaprov_gpu_ecc_errors_uncorrected_volatile_total{{{on_node}}}) or vector(0)"),
                w=3,
                description="Volatile uncorrected ECC errors of the node's GPUs since their last reset.",
                steps=RED_FROM_ONE,
            ),
            _stat(
                "Xid errors in range",
                _instant(f"sum(increase(megaprov_gpu_xid_errors_total{{{on_node}}}[$__range])) or vector(0)"),
                w=3,
                description="Xid errors the kernel logged for the node's GPUs in the dashboard's time range.",
                steps=ORANGE_FROM_ONE,
            ),
            _stat(
                "Remapped rows pending",
                _instant(f"sum(megaprov_gpu_remapped_rows_pending{{{on_node}}}) or vector(0)"),
                w=3,
                description="GPUs with a row remapping pending: it takes effect at the GPU's next reset.",
                steps=ORANGE_FROM_ONE,
            ),
            _stat(
                "Thermal throttling",
                _instant(f"sum(megaprov_gpu_throttle_thermal{{{on_node}}}) or vector(0)"),
                w=3,
                description="GPUs held back by a thermal slowdown now.",
                steps=ORANGE_FROM_ONE,
            ),
        ),
    )
    system = Row(
        "System",
        (
            _series(
                "CPU",
                Query(
                    f'sum by (mode) (rate(node_cpu_seconds_total{{{on_node}, mode!="idle"}}[$__rate_interval]))'
                    f' / scalar(count(node_cpu_seconds_total{{{on_node}, mode="idle"}}))',
                    "{{mode}}",
                ),
                description="Share of all CPUs busy, by mode.",
                unit="percentunit",
                min=0,
                max=1,
                custom={"fillOpacity": 40, "stacking": {"mode": "normal", "group": "A"}},
            ),
            _series(
                "Memory",
                Query(f"node_memory_MemTotal_bytes{{{on_node}}} - node_memory_MemAvailable_bytes{{{on_node}}}", "used"),
                Query(f"node_memory_MemTotal_bytes{{{on_node}}}", "total"),
                description="Memory in use (total less what the kernel reports available) and the total.",
                unit="bytes",
                min=0,
                overrides=(_dashed("total", "red"),),
            ),
            _series(
                "Network",
                Query(f'sum by (device) (rate(node_network_receive_bytes_total{{{on_node}, device!="lo"}}[$__rate_interval]))', "{{device}} rx"),
                Query(f'sum by (device) (rate(node_network_transmit_bytes_total{{{on_node}, device!="lo"}}[$__rate_interval]))', "{{device}} tx"),
                description="Bytes received and sent per second, by interface.",
                unit="Bps",
                min=0,
            ),
            _series(
                "Filesystem usage",
                Query(f"1 - node_filesystem_avail_bytes{{{fs}}} / node_filesystem_size_bytes{{{fs}}}", "{{mountpoint}}"),
                description="Used share of each mounted filesystem (in-memory filesystems left out).",
                unit="percentunit",
                min=0,
                max=1,
            ),
        ),
    )
    gpus = Row(
        "GPUs",
        (
            _series("GPU utilisation", Query(per_gpu("megaprov_gpu_utilization_ratio"), gpu_legend), unit="percentunit", min=0, max=1),
            _series(
                "GPU memory used",
                Query(f"{per_gpu('megaprov_gpu_memory_used_bytes')} / {per_gpu('megaprov_gpu_memory_total_bytes')}", gpu_legend),
                description="Each GPU's memory in use, as a share of its total.",
                unit="percentunit",
                min=0,
                max=1,
            ),
            _series("GPU temperature", Query(per_gpu("megaprov_gpu_temperature_celsius"), gpu_legend), unit="celsius"),
            _series("GPU power", Query(per_gpu("megaprov_gpu_power_watts"), gpu_legend), unit="watt", min=0),
            _series(
                "Uncorrected ECC errors (volatile)",
                Query(per_gpu("megaprov_gpu_ecc_errors_uncorrected_volatile_total"), gpu_legend),
                unit="short",
                min=0,
                decimals=0,
                custom={"lineInterpolation": "stepAfter"},
            ),
            _series(
                "Xid errors",
                Query(f"sum by (gpu, xid) (increase(megaprov_gpu_xid_errors_total{{{on_node}}}[$__rate_interval]))", "GPU {{gpu}} Xid {{xid}}"),
                description="Xid errors the kernel logged, by GPU and Xid code.",
                unit="short",
                min=0,
                custom={"drawStyle": "bars", "fillOpacity": 80},
            ),
            Panel(
                "table",
                "GPU inventory",
                (_row_of(f"max by (gpu, name, uuid, pci_bus_id) (megaprov_gpu_info{{{on_node}}})"),),
                w=24,
                h=6,
                description="The node's GPUs as the GPU collector last saw them.",
                transformations=(
                    {
                        "id": "organize",
                        "options": {
                            "excludeByName": {"Time": True, "Value": True},
                            "renameByName": {"pci_bus_id": "PCI bus id"},
                            "indexByName": {"gpu": 0, "name": 1, "uuid": 2, "pci_bus_id": 3},
                        },
                    },
                ),
                options={"sortBy": [{"displayName": "gpu", "desc": False}]},
            ),
        ),
    )
    return dashboard(
        NODE_UID,
        "megaprov / Node",
        "One node of the megaprov cluster: its system (CPU, memory, network, filesystems) and its GPUs.",
        (summary, system, gpus),
        (Variable("node", "Node", "megaprov_node_info"),),
    )


# ---- one training job


def job_dashboard() -> JsonObject:
    on_job = 'job="$job"'
    gpu_legend = "{{node}} GPU {{gpu}}"

    def of_job(metric: str) -> str:
        return f"max({metric}{{{on_job}}})"

    checkpoint_age = f"{of_job('megaprov_job_iteration')} - {of_job('megaprov_job_checkpoint_iteration')}"
    summary = Row(
        "Job",
        (
            _stat(
                "State",
                _instant(of_job("megaprov_job_running")),
                w=3,
                mappings=((1, "running", "green"), (0, "stopped", "blue")),
            ),
            _stat(
                "Iteration",
                _instant(of_job("megaprov_job_iteration"), "iteration"),
                _instant(of_job("megaprov_job_train_iterations"), "of"),
                w=4,
                options={"textMode": "value_and_name"},
            ),
            Panel(
                "gauge",
                "Progress",
                (_instant(f"{of_job('megaprov_job_iteration')} / {of_job('megaprov_job_train_iterations')}"),),
                w=3,
                h=4,
                unit="percentunit",
                min=0,
                max=1,
                decimals=1,
                steps=((None, "blue"),),
            ),
            _stat(
                "Tokens/s of plan",
                _instant(f"{of_job('megaprov_job_tokens_per_second')} / {of_job('megaprov_job_expected_tokens_per_second')}"),
                w=4,
                description="Tokens per second now, as a share of what the plan expects for this model on these GPUs.",
                unit="percentunit",
                decimals=0,
                steps=((None, "blue"),),
            ),
            _stat(
                "Throughput floor",
                _instant(f"{of_job('megaprov_job_tokens_per_second')} < bool {of_job('megaprov_job_tokens_per_second_floor')}"),
                w=3,
                description="Whether tokens/s is below the floor under which megaprov reports the job too slow.",
                mappings=((0, "above", "green"), (1, "below", "red")),
            ),
            _stat("Restarts", _instant(of_job("megaprov_job_restarts_total")), w=3, steps=ORANGE_FROM_ONE),
            _stat(
                "Since last progress",
                _instant(f"time() - {of_job('megaprov_job_last_progress_timestamp_seconds')}"),
                w=4,
                description="Time since the job last reported a new iteration.",
                unit="s",
            ),
        ),
    )
    training = Row(
        "Training",
        (
            _series("Loss", Query(of_job("megaprov_job_loss"), "loss"), description="The training loss Megatron-LM logs."),
            _series(
                "Tokens/s against plan",
                Query(of_job("megaprov_job_tokens_per_second"), "tokens/s"),
                Query(of_job("megaprov_job_expected_tokens_per_second"), "expected"),
                Query(of_job("megaprov_job_tokens_per_second_floor"), "floor"),
                description="Tokens per second, against the plan's expectation and the floor under which the job is reported too slow.",
                min=0,
                overrides=(_dashed("expected", "blue"), _dashed("floor", "red")),
            ),
            _series(
                "TFLOP/s per GPU",
                Query(of_job("megaprov_job_tflops_per_gpu"), "TFLOP/s per GPU"),
                description="Model TFLOP/s per GPU, as Megatron-LM reports it.",
                min=0,
                custom={"axisLabel": "TFLOP/s"},
            ),
            _series("Iteration time", Query(of_job("megaprov_job_iteration_seconds"), "iteration"), unit="s", min=0),
            _series(
                "Checkpoint age",
                Query(checkpoint_age, "iterations since the checkpoint"),
                Query(f"2 * {of_job('megaprov_job_save_interval_iterations')}", "2 × save interval"),
                description="Iterations since the newest checkpoint, against twice the save interval (a save missed).",
                min=0,
                decimals=0,
                overrides=(_dashed("2 × save interval", "red"),),
            ),
            _series(
                "Restarts over time",
                Query(of_job("megaprov_job_restarts_total"), "restarts"),
                min=0,
                decimals=0,
                custom={"lineInterpolation": "stepAfter"},
            ),
        ),
    )
    gpus = Row(
        "GPUs of the job",
        (
            _series("GPU utilisation", Query(f"megaprov_gpu_utilization_ratio{{{on_job}}}", gpu_legend), unit="percentunit", min=0, max=1),
            _series("GPU memory used", Query(f"megaprov_gpu_memory_used_bytes{{{on_job}}}", gpu_legend), unit="bytes", min=0),
            _series(
                "Tensor core activity (DCGM)",
                Query(f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE and on (node, gpu) megaprov_gpu_utilization_ratio{{{on_job}}}", gpu_legend),
                description="DCGM's tensor pipe activity of the job's GPUs. Empty without dcgm-exporter.",
                unit="percentunit",
                min=0,
                max=1,
            ),
            _series("GPU power", Query(f"megaprov_gpu_power_watts{{{on_job}}}", gpu_legend), unit="watt", min=0),
        ),
    )
    return dashboard(
        JOB_UID,
        "megaprov / Training job",
        "One megaprov training job: progress, loss, throughput against the plan, checkpoints, restarts and its GPUs.",
        (summary, training, gpus),
        (Variable("job", "Job", "megaprov_job_iteration"),),
    )


# ---- the files


def dashboards() -> dict[str, JsonObject]:
    """Every dashboard, by its file name in the grafana role's files/dashboards."""
    return {f"{d['uid']}.json": d for d in (cluster_dashboard(), node_dashboard(), job_dashboard())}


def render(model: JsonObject) -> str:
    """The file's text: stable (keys in the order built, two-space indent, a final newline), so a diff is a change."""
    return json.dumps(model, indent=2, ensure_ascii=False) + "\n"


def rendered() -> dict[str, str]:
    return {name: render(model) for name, model in dashboards().items()}
