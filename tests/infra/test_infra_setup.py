"""tests/setup.sh, what `make test` and `make faults` run first: on a machine with everything it does
nothing (and never calls apt); as root with apt it installs what is missing (Valkey from
bookworm-backports, adding that source once); otherwise it stops at once with one line naming the
missing packages and how to install them; and it starts the tests' Redis when nothing answers there.

The script runs with a PATH that holds every program of /usr/bin and /usr/local/bin but the ones a
test hides, and a fake apt-get (and systemctl, service) that only writes down how it was called."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "tests" / "setup.sh"
CODENAME = next(
    (line.split("=", 1)[1].strip().strip('"') for line in Path("/etc/os-release").read_text().splitlines()
     if line.startswith("VERSION_CODENAME=")), "",
)  # fmt: skip
VALKEY_HOW = (
    "apt-get install -t bookworm-backports valkey-server (with bookworm-backports in apt's sources)"
    if CODENAME == "bookworm"
    else "apt-get install valkey-server"
)
FAKES = ("apt-get", "apt-cache", "systemctl", "service")


class Machine:
    """A PATH without ``hidden`` programs, a fake apt that logs its calls, an apt directory of its own."""

    def __init__(self, tmp: Path, hidden: tuple[str, ...]) -> None:
        self.bin = tmp / "bin"
        self.bin.mkdir()
        self.calls = tmp / "calls.log"
        self.apt = tmp / "apt"
        (self.apt / "sources.list.d").mkdir(parents=True)
        for directory in (Path("/usr/local/bin"), Path("/usr/bin")):
            for program in directory.iterdir():
                link = self.bin / program.name
                if program.name not in hidden and program.name not in FAKES and not link.exists():
                    link.symlink_to(program)
        for fake in FAKES:
            if fake not in hidden:
                (self.bin / fake).write_text(f'#!/bin/sh\necho "{fake} $*" >>"{self.calls}"\n')
                (self.bin / fake).chmod(0o755)

    def run(self, *, uid: int = 0, redis_url: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {"PATH": str(self.bin), "DELAYQ_SETUP_UID": str(uid), "DELAYQ_SETUP_APT": str(self.apt)}
        env["DELAYQ_TEST_REDIS_URL"] = redis_url or os.environ.get("DELAYQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
        return subprocess.run(
            ["/bin/bash", str(SETUP)], env=env, cwd=self.apt, capture_output=True, text=True, timeout=60, check=False
        )

    def apt_calls(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []


@pytest.fixture
def machine(tmp_path: Path, request: pytest.FixtureRequest) -> Machine:
    return Machine(tmp_path, getattr(request, "param", ()))


def test_with_everything_there_it_does_nothing_and_never_calls_apt(machine: Machine) -> None:
    done = machine.run()
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert machine.apt_calls() == []


@pytest.mark.parametrize(
    ("machine", "line"),
    [
        (("faketime",), "missing faketime: as root, apt-get install faketime"),
        (("valkey-server",), f"missing valkey-server: as root, {VALKEY_HOW}"),
        (
            ("redis-server", "redis-cli", "chromium", "valkey-server"),
            f"missing redis-server redis-tools valkey-server chromium: as root, "
            f"apt-get install redis-server redis-tools chromium && {VALKEY_HOW}",
        ),
    ],
    indirect=["machine"],
    ids=["faketime", "valkey", "four"],
)
def test_not_root_it_stops_at_once_with_one_line_naming_the_packages(machine: Machine, line: str) -> None:
    done = machine.run(uid=1000)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", f"tests/setup.sh: {line}\n")
    assert machine.apt_calls() == []


@pytest.mark.parametrize("machine", [("faketime", "apt-get")], indirect=True)
def test_as_root_without_apt_it_stops_the_same_way(machine: Machine) -> None:
    done = machine.run(uid=0)
    assert done.returncode == 1
    assert done.stderr == "tests/setup.sh: missing faketime: as root, apt-get install faketime\n"


@pytest.mark.parametrize("machine", [("faketime", "valkey-server")], indirect=True)
def test_as_root_it_asks_apt_for_what_is_missing_and_says_what_apt_left_missing(machine: Machine) -> None:
    """The fake apt installs nothing: the script asks for the right packages, then says they are still
    missing. The backports source is added once, whatever the number of runs."""
    first, second = machine.run(), machine.run()
    backports = CODENAME == "bookworm"
    update, plain = "apt-get -q -y update", "apt-get -q -y install faketime"
    valkey = "apt-get -q -y install -t bookworm-backports valkey-server" if backports else None
    once = [update, plain, *([valkey] if valkey else []), "systemctl disable --now valkey-server"]
    assert machine.apt_calls()[: len(once)] == once
    assert machine.apt_calls()[len(once) :] == once  # the second run asked again (nothing got installed)
    for done in (first, second):
        assert done.returncode == 1
        still = f"still missing after apt-get: faketime valkey-server: apt-get install faketime && {VALKEY_HOW}\n"
        assert done.stderr.endswith(still)
    sources = list((machine.apt / "sources.list.d").iterdir())
    if backports:
        assert [s.name for s in sources] == ["debian-backports.sources"]
        assert "Suites: bookworm-backports\n" in sources[0].read_text()
        assert "adding bookworm-backports" in first.stdout
        assert "adding" not in second.stdout
    else:
        assert sources == []


@pytest.mark.skipif(CODENAME != "bookworm", reason="the backports source is added on bookworm only")
@pytest.mark.parametrize(
    ("file", "content"),
    [
        (
            "debian.sources",
            "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n\n"
            "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n",
        ),
        ("../sources.list", "deb [arch=amd64] http://mirror.example/debian bookworm main\n"),
    ],
    ids=["deb822", "one-line"],
)
@pytest.mark.parametrize("machine", [("valkey-server",)], indirect=True)
def test_the_backports_source_uses_the_mirror_apt_already_has(machine: Machine, file: str, content: str) -> None:
    (machine.apt / "sources.list.d" / file).write_text(content)
    machine.run()
    added = (machine.apt / "sources.list.d" / "debian-backports.sources").read_text()
    assert "URIs: http://mirror.example/debian\nSuites: bookworm-backports\n" in added


@pytest.fixture
def spare_port() -> Iterator[int]:
    """A free port; whatever redis-server the script started there is killed afterwards, by its pid."""
    port = free_port()
    yield port
    try:
        pid = int(redis.Redis(port=port).info("server")["process_id"])
    except redis.ConnectionError:
        return
    os.kill(pid, signal.SIGKILL)


def test_it_starts_the_tests_redis_when_nothing_answers_there(machine: Machine, spare_port: int) -> None:
    url = f"redis://127.0.0.1:{spare_port}/0"
    done = machine.run(redis_url=url)
    assert (done.returncode, done.stdout) == (0, f"tests/setup.sh: starting redis-server on 127.0.0.1:{spare_port}\n")
    with redis.Redis.from_url(url) as started:
        assert started.ping()
        assert started.config_get("save") == {"save": ""}  # it keeps nothing on disk
    again = machine.run(redis_url=url)
    assert (again.returncode, again.stdout) == (0, "")  # it answers now: nothing started twice
