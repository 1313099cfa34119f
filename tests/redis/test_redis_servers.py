"""The private servers the tiers start (``support.servers``) are of the kind asked for, and one that fails
to start, however it fails (no such program, a program that exits, a server that never answers),
leaves nothing behind: no process, no temporary directory (whose late removal would fail an unrelated
test with a ResourceWarning)."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.servers import RedisClusterServers, RedisServer, Twemproxy, server_kind, server_program

EXITS_AT_ONCE = "/bin/false"


def test_a_private_server_is_of_the_kind_asked_for() -> None:
    """DELAYQ_TEST_SERVER=valkey: valkey-server, which says so in INFO; else redis-server, which does not."""
    assert Path(server_program()).name == f"{server_kind()}-server"
    with RedisServer() as server, server.client() as client:
        assert client.info("server").get("server_name", "redis") == server_kind()


@pytest.mark.parametrize("program", ["/nonexistent/redis-server", EXITS_AT_ONCE])
def test_a_redis_server_that_fails_to_start_leaves_nothing(program: str) -> None:
    server = RedisServer(program=program)
    with pytest.raises(FileNotFoundError if program != EXITS_AT_ONCE else RuntimeError, match=program):
        server.start()
    assert not server.dir.exists()
    assert server.process is None or server.process.poll() is not None


def test_a_redis_server_that_never_gets_ready_is_killed_and_leaves_nothing() -> None:
    server = RedisServer()
    with pytest.raises(RuntimeError, match=r"did not come up within 0\.5 s"):
        server.start(ready=lambda: False, timeout=0.5)
    assert server.process is not None
    assert server.process.returncode == -9  # killed, and reaped
    assert not server.dir.exists()


@pytest.mark.parametrize("program", ["/nonexistent/nutcracker", EXITS_AT_ONCE])
def test_a_twemproxy_that_fails_to_start_leaves_nothing(program: str) -> None:
    with RedisServer() as backend:
        proxy = Twemproxy([backend], program=program)
        config_dir = proxy.config.parent
        assert config_dir.exists()
        with pytest.raises(FileNotFoundError if program != EXITS_AT_ONCE else RuntimeError, match=program), proxy:
            pytest.fail("the with block must not run")
        assert not config_dir.exists()


def test_a_cluster_whose_node_fails_to_start_leaves_nothing() -> None:
    cluster = RedisClusterServers(masters=2, program=EXITS_AT_ONCE)
    with pytest.raises(RuntimeError, match="exited with 1"):
        cluster.start()
    assert not cluster.dir.exists()


def test_a_server_started_beside_a_failing_one_is_stopped(tmp_path: Path) -> None:
    """``with a, b``: b fails to start, a is stopped, and both directories are gone."""
    first, second = RedisServer(), RedisServer(program=str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError), first, second:
        pytest.fail("the with block must not run")
    assert first.process is not None
    assert first.process.returncode is not None
    assert not first.dir.exists()
    assert not second.dir.exists()
