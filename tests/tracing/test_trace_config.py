"""Tracing is configured by the standard OTEL_* variables and is off, and free, when they say nothing:
no observer, nothing of the SDK imported, nothing stored with a run. A configuration lockstep cannot
honour stops the process with one clear line (exit 2), never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tracekit import in_memory

from lockstep import Engine, Registry
from lockstep.app.tracing import tracing_configured
from lockstep.errors import InvalidInput

ENDPOINT = "http://127.0.0.1:9/v1/traces"


@pytest.mark.parametrize(
    ("env", "exporters"),
    [
        ({}, []),
        ({"OTEL_SERVICE_NAME": "x"}, []),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ENDPOINT}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "console, otlp"}, ["console", "otlp"]),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, []),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, []),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "TRUE"}, []),
    ],
)
def test_the_environment_decides_whether_a_process_traces(env: dict[str, str], exporters: list[str]) -> None:
    """Unset, tracing is off unless an OTLP endpoint is named; none and OTEL_SDK_DISABLED turn it off."""
    assert tracing_configured(env) == exporters


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "not zipkin"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTLP over HTTP"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, "4318"),
    ],
)
def test_a_configuration_lockstep_cannot_honour_is_refused_with_a_fix(env: dict[str, str], says: str) -> None:
    with pytest.raises(InvalidInput, match=says):
        tracing_configured(env)


def test_unconfigured_an_engine_registers_no_tracing_observer_and_stores_no_trace(tmp_path: Path) -> None:
    """Off: no tracing observer (the metrics' one is always there), and a run's RunStarted has no trace
    field (the stored bytes of before)."""
    with Engine.open(f"sqlite:///{tmp_path / 'db'}") as engine:
        assert engine.service.tracing is None
        owners = [type(getattr(o, "__self__", o)).__module__ for o in engine.service.observers]
        assert not [m for m in owners if m.startswith("lockstep.app.tracing")], owners
        engine.publish({"name": "w", "steps": [{"id": "w", "wait": "1h"}]})
        run_id = engine.start("w")
        with engine.service.read() as tx:
            started = tx.events(run_id)[0][0].data_json()
    assert "trace" not in started
    assert "trace_parent" not in started


def _python(code: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )


def test_unconfigured_nothing_of_the_sdk_is_imported(tmp_path: Path) -> None:
    """A process that does not trace never imports the OpenTelemetry SDK (nor the exporter)."""
    code = (
        "import sys; from lockstep import Engine\n"
        "e = Engine.open('sqlite:///x.db'); e.publish({'name': 'w', 'steps': [{'id': 'w', 'wait': '1h'}]})\n"
        "e.start('w'); e.close()\n"
        "sdk = ('opentelemetry.sdk', 'opentelemetry.exporter')\n"
        "print(sorted(m for m in sys.modules if m.startswith(sdk)))"
    )
    done = _python(code, {}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    traced = _python(code, {"OTEL_TRACES_EXPORTER": "console"}, tmp_path)
    assert "opentelemetry.sdk.trace" in traced.stdout  # the same code traces once told to


def test_a_worker_with_a_bad_tracing_setting_stops_with_one_line(tmp_path: Path) -> None:
    """`lockstep worker` under OTEL_TRACES_EXPORTER=jaeger: exit 2, a line naming the fix, no traceback."""
    (tmp_path / "acts.py").write_text(
        "from lockstep import activity\n@activity('a.b')\ndef f(x):\n    return x\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env = {**clean, "OTEL_TRACES_EXPORTER": "jaeger", "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "lockstep",
            "--db",
            f"sqlite:///{tmp_path / 'db'}",
            "worker",
            "--activities",
            "acts",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "OTEL_TRACES_EXPORTER" in done.stderr
    assert "otlp" in done.stderr
    assert "Traceback" not in done.stderr


def test_tracing_configured_without_the_sdk_names_the_extra(tmp_path: Path) -> None:
    """OTEL_* set but the SDK not installed (blocked here): a refusal naming `lockstep[otel]`."""
    code = (
        "import sys; sys.modules['opentelemetry.sdk'] = None\n"
        "from lockstep import Engine\nfrom lockstep.errors import InvalidInput\n"
        "try:\n    Engine.open('sqlite:///x.db')\nexcept InvalidInput as exc:\n    print(exc)\n"
    )
    done = _python(code, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, tmp_path)
    assert "lockstep[otel]" in done.stdout, done.stdout + done.stderr


def test_a_run_the_sampler_leaves_out_at_its_start_emits_no_span(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_TRACES_SAMPLER decides once, at the start: a run left out records its trace as not sampled
    (flags 00) and no process emits a span of it."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    tracing, exporter = in_memory()
    reg = Registry()
    reg.register("x.a", lambda data: {})
    one = {"name": "one", "steps": [{"id": "a", "activity": "x.a", "timeout": "10s"}]}
    with Engine.open(f"sqlite:///{tmp_path / 'db'}", tracing=tracing) as engine:
        engine.publish(one)
        worker = engine.worker(reg).start()
        try:
            run_id = engine.start("one")
            engine.wait_for(run_id)
        finally:
            worker.stop()
        with engine.service.read() as tx:
            trace = tx.events(run_id)[0][0].data_json()["trace"]
    assert trace.endswith("-00")
    assert exporter.get_finished_spans() == ()
