"""deploy/: the alerting rules pass `promtool check rules` and their unit tests (`promtool test rules`);
every rule has a `for:`, a severity, a summary and a runbook that exists in docs/operations.md; every
dashboard query is valid PromQL; and every metric the rules and the dashboard name is one a served
engine emits (a name that does not exist fails)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from metricsworld import Served, promtool

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "lockstep.json"
OPERATIONS = ROOT / "docs" / "operations.md"
NAME = re.compile(r"\blockstep_[a-z0-9_]+\b")
TYPE = re.compile(r"^# TYPE (\S+) (\w+)$", re.MULTILINE)
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


def _promtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=60
    )


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def _panels() -> list[dict[str, Any]]:
    doc = json.loads(DASHBOARD.read_text())
    return [p for p in doc["panels"] if p["type"] != "row"]


def _dashboard_queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in _panels() for t in p["targets"]]
    queries += [v["definition"] for v in doc["templating"]["list"] if v["type"] == "query"]
    return queries


def emitted(texts: dict[str, str]) -> set[str]:
    """Every series name the exposition texts declare (a histogram's family and its three series)."""
    names: set[str] = set()
    for text in texts.values():
        for name, kind in TYPE.findall(text):
            names.add(name)
            names.update(name + s for s in SUFFIXES.get(kind, ()))
    return names


def unknown_names(queries: list[str], known: set[str]) -> set[str]:
    return {n for q in queries for n in NAME.findall(q)} - known


def test_the_rules_pass_promtool_and_their_unit_tests() -> None:
    """`promtool check rules` on alerts.yml and `promtool test rules` on alerts_test.yml (two alerts:
    timer lag deduplicated over two serve processes, lease expiries summed over two workers)."""
    checked = _promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in checked.stdout
    tested = _promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_rule_says_how_long_how_bad_what_and_where_the_runbook_is() -> None:
    """for:, a severity, a summary, and a runbook_url whose anchor is a heading of docs/operations.md."""
    headings = {
        re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", OPERATIONS.read_text(), re.MULTILINE)
    }
    alerts = {r["alert"] for r in _rules()}
    assert {
        "LockstepRunsStuck",
        "LockstepQueueDelayGrowing",
        "LockstepTimerLag",
        "LockstepLeaseExpiryStorm",
        "LockstepNeedsAttentionGrowing",
        "LockstepApprovalSLABreached",
    } <= alerts
    for rule in _rules():
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule
        assert rule["labels"]["severity"] in ("warning", "critical"), rule
        assert rule["annotations"]["summary"], rule
        page, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert page == "docs/operations.md", rule
        assert anchor in headings, f"{rule['alert']}: no heading for #{anchor} in docs/operations.md"


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    """The dashboard's queries, with $tenant set, parse (checked by promtool as recording rules)."""
    queries = [q.replace("$tenant", ".*") for q in _dashboard_queries() if not q.startswith("label_values")]
    recorded = [{"record": f"q{i}", "expr": q} for i, q in enumerate(queries)]
    rules = {"groups": [{"name": "dashboard", "rules": recorded}]}
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump(rules))
    checked = _promtool("check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_dashboard_shows_what_operators_need_with_a_datasource_variable() -> None:
    """A Prometheus datasource variable every panel uses, a tenant variable, and a panel for each thing."""
    doc = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["tenant"]["datasource"]["uid"] == "${datasource}"
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for panel in _panels():
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"]), panel["title"]
    text = " ".join(f"{p['title']} {p['description']}".lower() for p in _panels())
    for topic in (
        "runs by status",
        "queue delay",
        "step duration",
        "attempt duration",
        "retries per step",
        "retry amplification",
        "time in approval",
        "timer lag",
        "needs attention",
        "dead letters",
        "leases",
        "refusals",
    ):
        assert topic in text, topic


def test_the_rules_and_the_dashboard_name_only_metrics_a_served_engine_emits(served: Served) -> None:
    """Every lockstep_* name in the rules and the dashboard's queries is declared by the /metrics of a
    served engine (serve, worker, scheduler); a made-up name is caught by the same check."""
    known = emitted({k: v for k, v in served.texts.items() if k != "driver"})
    assert "lockstep_queue_delay_seconds_bucket" in known
    assert "lockstep_runs_at_step" in known
    rule_queries = [r["expr"] for r in _rules()]
    assert unknown_names(rule_queries, known) == set()
    assert unknown_names(_dashboard_queries(), known) == set()
    assert unknown_names(["rate(lockstep_step_retries[5m])"], known) == {"lockstep_step_retries"}  # no _total
    used = {n for q in rule_queries + _dashboard_queries() for n in NAME.findall(q)}
    assert len(used) >= 25


@pytest.fixture(autouse=True)
def _repository_files_exist() -> None:
    for path in (RULES, RULE_TESTS, DASHBOARD):
        assert path.exists(), path
