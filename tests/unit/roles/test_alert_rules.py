"""The observe stage's Prometheus alert rules (roles/prometheus/files/rules/megaprov.rules.yml): promtool accepts them
and passes their unit tests (tests/fixtures/prometheus/megaprov.rules.test.yml), every alert has a case where it fires and one
where it must not, says how severe it is and what to do, and reads only the metrics megaprov and its exporters export."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.metrics import CONTRACT_METRICS
from tests.helpers.promtool import promtool

ROOT = Path(__file__).resolve().parents[3]
RULES_DIR = ROOT / "ansible_collections/megaprov/cluster/roles/prometheus/files/rules"
RULES = RULES_DIR / "megaprov.rules.yml"
# promtool's unit tests of the rules: kept out of the role, which ships only what runs
RULES_TEST = ROOT / "tests/fixtures/prometheus/megaprov.rules.test.yml"

# The metric contract (tests/helpers/metrics.py): a name outside it in a rule is a typo, or a metric nobody exports.
# The Xids that must each have an alert (NVIDIA's Xid catalogue: errors that lose a GPU, its memory or its links).
FATAL_XIDS = frozenset({48, 63, 64, 74, 79, 94, 95, 119, 120})
# What an operator can be told to do about a GPU.
ACTION_WORDS = re.compile(r"\b(drain|reset|reboot|restart|RMA|check|replace)\b", re.IGNORECASE)
# PromQL words that are not metric names: operators, modifiers and literals (function names are told apart by the
# parenthesis after them).
PROMQL_WORDS = frozenset({"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "Inf", "NaN"})


def run_promtool(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool()), *argv], cwd=RULES_DIR, capture_output=True, text=True, timeout=300)


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), f"{path}: not a YAML mapping"
    return data


def rules(kind: str) -> list[dict[str, Any]]:
    """The rules of megaprov.rules.yml that are alerts (kind "alert") or recordings (kind "record")."""
    return [rule for group in load(RULES)["groups"] for rule in group["rules"] if kind in rule]


def alerts() -> list[dict[str, Any]]:
    return rules("alert")


def alert_cases() -> list[dict[str, Any]]:
    """Every alert_rule_test case of megaprov.rules.test.yml."""
    return [case for test in load(RULES_TEST)["tests"] for case in test.get("alert_rule_test") or []]


def metric_names(expr: str) -> set[str]:
    """The metric names an expression (a rule's PromQL, or a template's query) selects. Pure.

    String literals, label matchers, ranges and the label lists of by/without/on/ignoring/group_* go first; what is
    left of the identifiers, less the PromQL words and the functions (a name before a parenthesis), are metrics."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names: set[str] = set()
    for match in re.finditer(r"(?<![\w.])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?", text):
        name, call = match.group(1), match.group(2)
        if not call and name not in PROMQL_WORDS:
            names.add(name)
    return names


def template_queries(text: str) -> list[str]:
    """The PromQL of the `query` calls in an annotation template (printf "..." ... | query). Pure."""
    return [query.replace("%q", '""') for query in re.findall(r'printf\s+"((?:[^"\\]|\\.)*)"[^}]*\|\s*query', text)]


def test_promtool_check_rules() -> None:
    # --lint-fatal: promtool's lint (duplicate rules, one label set twice) fails the check instead of printing
    proc = run_promtool("check", "rules", "--lint-fatal", RULES.name)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_test_rules() -> None:
    proc = run_promtool("test", "rules", str(RULES_TEST))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout, proc.stdout + proc.stderr


def test_the_rule_tests_load_the_roles_rules_every_15_seconds() -> None:
    tests = load(RULES_TEST)
    # promtool reads rule_files relative to the test file
    assert [(RULES_TEST.parent / name).resolve() for name in tests["rule_files"]] == [RULES.resolve()]
    assert tests["evaluation_interval"] == "15s"
    assert all(test.get("interval") == "15s" for test in tests["tests"])


def test_every_alert_has_a_case_where_it_fires_and_one_where_it_must_not() -> None:
    cases = alert_cases()
    fired = {case["alertname"] for case in cases if case.get("exp_alerts")}
    quiet = {case["alertname"] for case in cases if not case.get("exp_alerts")}
    names = {rule["alert"] for rule in alerts()}
    assert names - fired == set(), "alerts with no case where they fire"
    assert names - quiet == set(), "alerts with no case where they must not fire"
    assert (fired | quiet) - names == set(), "cases of alerts that do not exist"


def test_every_rule_of_an_alert_fires_in_a_case() -> None:
    # An alert with several rules (GpuThermalViolation: the collector's flag, DCGM's counter) has each of them fire,
    # told apart by their labels.
    expected = [{**exp.get("exp_labels", {}), "alertname": case["alertname"]} for case in alert_cases() for exp in case.get("exp_alerts") or []]
    for rule in alerts():
        labels = {**rule["labels"], "alertname": rule["alert"]}
        assert any(labels.items() <= fired.items() for fired in expected), f"no case where the rule {labels} fires"


def test_every_alert_says_how_severe_it_is_what_happened_and_what_to_do() -> None:
    for rule in alerts():
        name, annotations = rule["alert"], rule.get("annotations", {})
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", name), f"{name}: not CamelCase"
        assert rule.get("labels", {}).get("severity") in ("critical", "warning"), f"{name}: severity"
        for key in ("summary", "description", "action"):
            assert str(annotations.get(key, "")).strip(), f"{name}: no {key} annotation"
        # the description names what it is about: a node, GPU, job or mount point, from the alert's labels
        assert re.search(r"\$labels\.(node|gpu|job|mountpoint)\b", annotations["description"]), f"{name}: the description names nothing"


def test_every_fatal_xid_has_its_alert_with_the_xid_and_its_action() -> None:
    by_xid: dict[int, dict[str, Any]] = {}
    for rule in alerts():
        match = re.fullmatch(r"GpuXid(\d+)[A-Za-z]+", rule["alert"])
        if match:
            by_xid[int(match.group(1))] = rule
    assert set(by_xid) == FATAL_XIDS
    for xid, rule in sorted(by_xid.items()):
        annotations = rule["annotations"]
        assert f'xid="{xid}"' in rule["expr"], f"Xid {xid}: the expression selects another Xid"
        for key in ("summary", "description", "action"):
            assert re.search(rf"\bXid {xid}\b", annotations[key]), f"Xid {xid}: not named in {key}"
        assert ACTION_WORDS.search(annotations["action"]), f"Xid {xid}: the action says nothing to do"
        assert rule.get("for", "0m") in ("0m", "0s"), f"Xid {xid}: a fatal Xid fires at once"


def test_the_rules_read_only_the_metric_contract() -> None:
    recorded = {rule["record"] for rule in rules("record")}
    assert all(re.fullmatch(r"megaprov:[a-z0-9_]+:[a-z0-9_]+", name) for name in recorded), recorded
    unknown: dict[str, list[str]] = {}
    for rule in rules("record") + alerts():
        queries = [rule["expr"]] + [query for text in rule.get("annotations", {}).values() for query in template_queries(text)]
        names: set[str] = set().union(*(metric_names(query) for query in queries))
        if names - CONTRACT_METRICS - recorded:
            unknown[rule.get("alert") or rule["record"]] = sorted(names - CONTRACT_METRICS - recorded)
        assert names, f"{rule.get('alert') or rule['record']}: reads no metric"
    assert unknown == {}, "metric names outside the contract (a typo?)"


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('up{job="node"} == 0', {"up"}),
        ("max by (node, gpu) (increase(DCGM_FI_DEV_PCIE_REPLAY_COUNTER[10m])) / 1e6 > 0.9", {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER"}),
        ("a - on (job, node) (b or on (job) c * 0) > bool 2 and d offset 10m unless abs(e) == +Inf", {"a", "b", "c", "d", "e"}),
        ('increase((max by (job) (megaprov:x:y{job="a,b}"}))[30m:15s])', {"megaprov:x:y"}),
        ("megaprov_jbo_running == 1 and on (job) time() - megaprov_job_loss > 5", {"megaprov_jbo_running", "megaprov_job_loss"}),
    ],
)
def test_metric_names_finds_the_selected_metrics(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_template_queries_are_read_too() -> None:
    text = '{{ with printf "megaprov_job_floor{job=%q}" $labels.job | query }}{{ . | first | value }}{{ end }} and {{ $value }}'
    assert template_queries(text) == ['megaprov_job_floor{job=""}']
    assert metric_names(template_queries(text)[0]) == {"megaprov_job_floor"}
