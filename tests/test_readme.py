"""README.md's examples work as written: the test copies every fenced block out of the README itself (so
they cannot drift) and runs them in order, as one newcomer's shell session, in a fresh directory with a
clean environment; where the README shows output (a ```text output block), the output must match."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from lockstep.core.definition import parse_definition

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```$", re.S | re.M)
MARK = "@@readme block {}@@"


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, the words after it (`file=NAME`, `no-test`, `output`), its text."""

    lang: str
    words: tuple[str, ...]
    body: str
    line: int

    def file(self) -> str | None:
        names = [w.removeprefix("file=") for w in self.words if w.startswith("file=")]
        return names[0] if names else None


def blocks(text: str) -> list[Block]:
    """The README's fenced blocks, in order."""
    return [
        Block(m[1], tuple(m[2].split()), m[3], text.count("\n", 0, m.start()) + 1)
        for m in FENCE.finditer(text)
    ]


def script_of(found: list[Block], workdir: Path) -> tuple[str, dict[int, Block]]:
    """One bash session running the blocks in order, and each shown output by its example's number."""
    parts = ["trap 'kill $(jobs -p) 2>/dev/null || true' EXIT"]  # a background serve/worker ends with us
    expected: dict[int, Block] = {}
    last = -1
    for n, b in enumerate(found):
        where = f"README.md line {b.line}"
        if b.lang == "mermaid" or "no-test" in b.words:
            continue
        if b.lang == "text" and "output" in b.words:
            assert last >= 0, f"{where}: an output block follows no example"
            assert last not in expected, f"{where}: a second output block for one example"
            expected[last] = b
            continue
        if b.lang == "yaml":
            if (name := b.file()) is not None:
                (workdir / name).write_text(b.body)
            elif isinstance(steps := yaml.safe_load(b.body), list):
                # A fragment of a definition's steps: it must parse as the steps of a definition.
                parse_definition({"name": f"readme-line-{b.line}", "steps": steps})
            continue
        if b.lang == "python":
            name = b.file() or f"readme_block_{n}.py"
            (workdir / name).write_text(b.body)
            body = f"python {name}"
        elif b.lang == "sh":
            body = b.body
        else:
            raise AssertionError(f"{where}: a ```{b.lang} block: mark it no-test (and say why) or run it")
        parts += [f"echo '{MARK.format(n)}'", body]
        last = n
    return "\n".join(parts) + "\n", expected


def matches(expected: str, got: str) -> bool:
    """Each expected line appears in `got`, in order; `...` stands for anything (ids, digests, times)."""
    lines = [" ".join(line.split()) for line in got.splitlines()]
    at = 0
    for want in expected.splitlines():
        pattern = re.compile(".*".join(re.escape(p) for p in " ".join(want.split()).split("...")))
        while at < len(lines) and not pattern.fullmatch(lines[at]):
            at += 1
        if at == len(lines):
            return False
        at += 1
    return True


def isolated(cmd: list[str]) -> list[str]:
    """The command in its own network namespace where the machine allows it (see the comment inside)."""
    # The README's fixed port 8080 then cannot clash with anything else on this machine, and nothing the
    # examples start can reach beyond loopback.
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return cmd
    if subprocess.run(["unshare", "-rn", "true"], capture_output=True, check=False).returncode != 0:
        return cmd
    return ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *cmd]


def test_the_readme_examples_run_as_written(tmp_path: Path) -> None:
    """Every sh, python and yaml block of README.md runs in order and prints the output the README shows."""
    missing = [tool for tool in ("bash", "curl", "jq") if shutil.which(tool) is None]
    assert not missing, f"the README's examples need {', '.join(missing)} (not found)"
    found = blocks(README.read_text(encoding="utf-8"))
    work = tmp_path / "work"
    (work / "home").mkdir(parents=True)
    # The README publishes src/lockstep/examples/card-payment.yaml as from a checkout; only that is linked.
    (work / "src").symlink_to(ROOT / "src")
    script, expected = script_of(found, work)
    assert sum(1 for b in found if b.lang == "sh" and "no-test" not in b.words) >= 4, "examples went missing"
    (work / "readme.sh").write_text(script)
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(work / "home"),
        "LANG": "C.UTF-8",
        "COLUMNS": "200",
    }
    proc = subprocess.Popen(
        isolated(["bash", "-euo", "pipefail", "readme.sh"]),
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        # About 40 s on a quiet machine; CI runs it beside three other test processes on two cores.
        out, err = proc.communicate(timeout=360)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever a block left behind
        proc.wait()  # reaped here, not reported as still running by a later test's garbage collection
    assert proc.returncode == 0, f"a README example failed (exit {proc.returncode}):\n{out}\n{err}"
    pieces = re.split(r"^@@readme block (\d+)@@\n", out, flags=re.M)
    by_block = dict(zip(pieces[1::2], pieces[2::2], strict=True))
    for n, want in expected.items():
        got = by_block.get(str(n), "")
        assert matches(want.body, got), (
            f"README.md line {want.line}: the output shown differs from what the example printed:\n{got}"
        )
