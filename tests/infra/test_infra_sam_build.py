"""``sam build`` of infra/template.yaml: the artifact of each function holds the handlers, the delayq
package with its Lua scripts, and the runtime dependencies of functions/requirements.txt as arm64
wheels.

Needs the SAM CLI (``DELAYQ_SAM``, else ``sam`` on PATH), a Python 3.12 to build with (the functions'
runtime; ``python3.12`` on PATH or under pyenv) and PyPI. About 20 s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from samtranslator.yaml_helper import yaml_parse

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "infra" / "template.yaml"
FUNCTIONS = {"Enqueue": "enqueue.py", "Sweep": "sweep.py", "Consume": "consume.py"}
PACKAGES = (
    "redis",
    "hiredis",
    "boto3",
    "botocore",
    "aws_lambda_powertools",
    "aws_xray_sdk",
    "fastjsonschema",
    "pydantic",
    "cronsim",
    "tzdata",  # the zone rules of recurring schedules: a Lambda runtime promises none of its own
)


def _sam() -> str:
    sam = os.environ.get("DELAYQ_SAM") or shutil.which("sam")
    if not sam:  # a failure, not a skip: CI must build the bundle
        pytest.fail("the SAM CLI is not installed: run the tests with `make test`, which installs it")
    return sam


def _python312() -> Path:
    """A Python 3.12 that runs: sam build refuses to build a python3.12 function with another."""
    found = shutil.which("python3.12")
    candidates = [Path(found)] if found else []
    candidates += sorted(Path.home().glob(".pyenv/versions/3.12*/bin/python3.12"))
    for candidate in candidates:
        probe = subprocess.run([candidate, "--version"], capture_output=True, text=True, check=False)
        if probe.returncode == 0:
            return candidate
    pytest.fail("no working python3.12 to build the python3.12 functions with (install it, e.g. with pyenv)")


@pytest.mark.sam
@pytest.mark.timeout(600)
def test_sam_build_packages_handlers_delayq_and_arm64_dependencies(tmp_path: Path) -> None:
    sam, python = _sam(), _python312()
    build = tmp_path / "build"
    env = {**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}", "SAM_CLI_TELEMETRY": "0"}
    result = subprocess.run(
        [sam, "build", "--template-file", str(TEMPLATE), "--build-dir", str(build)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr

    built = yaml_parse((build / "template.yaml").read_text(encoding="utf-8"))
    for function, handler in FUNCTIONS.items():
        assert built["Resources"][function]["Properties"]["CodeUri"] == function
        root = build / function
        assert (root / handler).is_file(), function
        assert (root / "delayq" / "__init__.py").is_file(), function
        assert (root / "delayq" / "py.typed").is_file(), function
        assert sorted(p.name for p in (root / "delayq" / "store" / "lua").glob("*.lua")) == sorted(
            p.name for p in (ROOT / "functions" / "delayq" / "store" / "lua").glob("*.lua")
        )
        for package in PACKAGES:
            assert (root / package).is_dir(), (function, package)
        assert (root / "tzdata" / "zoneinfo" / "Europe" / "Paris").is_file(), function
        for compiled in ("hiredis", "pydantic_core"):
            assert list((root / compiled).glob("*aarch64-linux-gnu.so")), (function, compiled)
