"""``delayq.core.settings``: read from an explicit environment mapping, never ``os.environ``."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import ValidationError

from delayq.core.errors import ConfigError
from delayq.core.schedule import DEFAULT_BACKOFF_S
from delayq.core.settings import DEFAULT_REDIS_URL, ENV, MAX_REPLICAS_WAIT_MS, Settings, TopicConfig, Topics
from delayq.store.connection import SOCKET_TIMEOUT_S

TOPICS = {
    "orders": {"target": "python:app.jobs:order", "timeout": 10, "retries": 5, "backoff": [1, 2.5]},
    "*": {"target": "https://example.com/hook"},
}


def test_env_names():
    assert ENV.REDIS_URL == "DELAYQ_REDIS_URL"
    assert ENV.REDIS_MODE == "DELAYQ_REDIS_MODE"
    assert ENV.REDIS_SECRET == "DELAYQ_REDIS_SECRET"
    assert ENV.NAMESPACE == "DELAYQ_NAMESPACE"
    assert ENV.PARTITIONS == "DELAYQ_PARTITIONS"
    assert ENV.TOPICS == "DELAYQ_TOPICS"
    assert ENV.TICK == "DELAYQ_TICK"
    assert ENV.LOOP_SECONDS == "DELAYQ_LOOP_SECONDS"
    assert ENV.WEBHOOK_SECRET == "DELAYQ_WEBHOOK_SECRET"
    assert ENV.UI_TOKEN == "DELAYQ_UI_TOKEN"
    assert ENV.API_BASE_PATH == "DELAYQ_API_BASE_PATH"


def test_defaults():
    settings = Settings.from_env({})
    assert settings.redis_url == DEFAULT_REDIS_URL == "redis://127.0.0.1:6379/0"
    assert settings.redis_mode == "standalone"
    assert settings.redis_secret is None
    assert settings.namespace == "delayq"
    assert settings.partitions == 1
    assert len(settings.topics) == 0
    assert settings.topics.for_topic("orders") is None
    assert settings.tick == 1.0
    assert settings.loop_seconds == 60.0
    assert settings.webhook_secret is None
    assert settings.ui_token is None
    assert settings == Settings()


def test_from_env_does_not_read_os_environ_when_given_a_mapping(monkeypatch):
    for name in vars(ENV).values():
        if isinstance(name, str) and name.startswith("DELAYQ_"):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DELAYQ_NAMESPACE", "from-os")
    monkeypatch.setenv("DELAYQ_PARTITIONS", "7")
    assert Settings.from_env({}).namespace == "delayq"
    assert Settings.from_env({}).partitions == 1
    assert Settings.from_env().namespace == "from-os"
    assert Settings.from_env().partitions == 7


@pytest.mark.parametrize(
    ("name", "value", "attribute", "expected"),
    [
        ("DELAYQ_REDIS_URL", "rediss://cache.example.com:6380/0", "redis_url", "rediss://cache.example.com:6380/0"),
        ("DELAYQ_REDIS_URL", "unix:///tmp/redis.sock", "redis_url", "unix:///tmp/redis.sock"),
        ("DELAYQ_REDIS_MODE", "cluster", "redis_mode", "cluster"),
        ("DELAYQ_REDIS_MODE", "standalone", "redis_mode", "standalone"),
        ("DELAYQ_REDIS_MODE", " Cluster ", "redis_mode", "cluster"),
        ("DELAYQ_REDIS_MODE", "STANDALONE", "redis_mode", "standalone"),
        (
            "DELAYQ_REDIS_SECRET",
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:redis",
            "redis_secret",
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:redis",
        ),
        ("DELAYQ_REDIS_SECRET", "", "redis_secret", None),
        ("DELAYQ_NAMESPACE", "prod:eu-1", "namespace", "prod:eu-1"),
        ("DELAYQ_NAMESPACE", "", "namespace", "delayq"),
        ("DELAYQ_PARTITIONS", "4", "partitions", 4),
        ("DELAYQ_PARTITIONS", " 16 ", "partitions", 16),
        ("DELAYQ_PARTITIONS", "16384", "partitions", 16384),
        ("DELAYQ_PARTITIONS", "", "partitions", 1),
        ("DELAYQ_TICK", "0.2", "tick", 0.2),
        ("DELAYQ_TICK", "5", "tick", 5.0),
        ("DELAYQ_TICK", "0.001", "tick", 0.001),
        ("DELAYQ_TICK", "60", "tick", 60.0),
        ("DELAYQ_TICK", "", "tick", 1.0),
        ("DELAYQ_LOOP_SECONDS", "0", "loop_seconds", 0.0),
        ("DELAYQ_LOOP_SECONDS", "840", "loop_seconds", 840.0),
        ("DELAYQ_LOOP_SECONDS", "900", "loop_seconds", 900.0),
        ("DELAYQ_LOOP_SECONDS", "", "loop_seconds", 60.0),
        ("DELAYQ_WEBHOOK_SECRET", "s3cr3t", "webhook_secret", "s3cr3t"),
        ("DELAYQ_WEBHOOK_SECRET", "", "webhook_secret", None),
        ("DELAYQ_UI_TOKEN", "tok-3f9c", "ui_token", "tok-3f9c"),
        ("DELAYQ_UI_TOKEN", "", "ui_token", None),
        ("DELAYQ_API_BASE_PATH", "/delayq", "api_base_path", "/delayq"),
        ("DELAYQ_API_BASE_PATH", "delayq", "api_base_path", "/delayq"),
        ("DELAYQ_API_BASE_PATH", " /delayq/ ", "api_base_path", "/delayq"),
        ("DELAYQ_API_BASE_PATH", "/v1/queue", "api_base_path", "/v1/queue"),
        ("DELAYQ_API_BASE_PATH", "/", "api_base_path", ""),
        ("DELAYQ_API_BASE_PATH", "", "api_base_path", ""),
        ("DELAYQ_MIN_REPLICAS", "1", "min_replicas", 1),
        ("DELAYQ_MIN_REPLICAS", "", "min_replicas", 0),
        ("DELAYQ_MIN_REPLICAS_WAIT_MS", "250", "min_replicas_wait_ms", 250),
        ("DELAYQ_MIN_REPLICAS_WAIT_MS", "", "min_replicas_wait_ms", 1000),
    ],
)
def test_each_variable(name, value, attribute, expected):
    settings = Settings.from_env({name: value})
    assert getattr(settings, attribute) == expected


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DELAYQ_PARTITIONS", "x"),
        ("DELAYQ_PARTITIONS", "1.5"),
        ("DELAYQ_PARTITIONS", "four"),
        ("DELAYQ_TICK", "fast"),
        ("DELAYQ_TICK", "1s"),
        ("DELAYQ_LOOP_SECONDS", "a minute"),
        ("DELAYQ_LOOP_SECONDS", "60,5"),
        ("DELAYQ_MIN_REPLICAS", "one"),
        ("DELAYQ_MIN_REPLICAS_WAIT_MS", "1s"),
    ],
)
def test_bad_numbers_name_the_variable(name, value):
    with pytest.raises(ConfigError, match=f"^{name} must be a number") as info:
        Settings.from_env({name: value})
    assert repr(value) in info.value.message


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DELAYQ_PARTITIONS", "0"),
        ("DELAYQ_PARTITIONS", "-1"),
        ("DELAYQ_PARTITIONS", "16385"),
        ("DELAYQ_TICK", "0"),
        ("DELAYQ_TICK", "0.0009"),
        ("DELAYQ_TICK", "61"),
        ("DELAYQ_TICK", "-1"),
        ("DELAYQ_TICK", "nan"),
        ("DELAYQ_TICK", "inf"),
        ("DELAYQ_LOOP_SECONDS", "-1"),
        ("DELAYQ_LOOP_SECONDS", "901"),
        ("DELAYQ_LOOP_SECONDS", "nan"),
        ("DELAYQ_LOOP_SECONDS", "inf"),
        ("DELAYQ_MIN_REPLICAS", "-1"),
        ("DELAYQ_MIN_REPLICAS", "101"),
        ("DELAYQ_MIN_REPLICAS_WAIT_MS", "0"),
        ("DELAYQ_MIN_REPLICAS_WAIT_MS", "4001"),
    ],
)
def test_numbers_out_of_range_name_the_variable(name, value):
    with pytest.raises(ConfigError, match=f"^{name} must be between"):
        Settings.from_env({name: value})


@pytest.mark.parametrize("base", ["/has space", "/a//b", "/tab\there", "/new\nline", "/é", "/q?x=1", "/a#b"])
def test_a_base_path_of_characters_no_mapping_takes_is_refused_naming_it(base):
    with pytest.raises(ConfigError, match="DELAYQ_API_BASE_PATH"):
        Settings.from_env({"DELAYQ_API_BASE_PATH": base})
    with pytest.raises(ConfigError, match="DELAYQ_API_BASE_PATH"):
        Settings(api_base_path=base)


@pytest.mark.parametrize("mode", ["sentinel", "clustered", "redis", "standalone-ish"])
def test_redis_mode_validation(mode):
    with pytest.raises(ConfigError, match="DELAYQ_REDIS_MODE must be 'standalone' or 'cluster'") as info:
        Settings.from_env({"DELAYQ_REDIS_MODE": mode})
    assert repr(mode) in info.value.message


def test_redis_mode_validated_on_construction_too():
    with pytest.raises(ConfigError, match="DELAYQ_REDIS_MODE"):
        Settings(redis_mode="sentinel")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "namespace",
    ["a{b}", "{delayq}", "delay}q", "delay{q", "has space", "_private", "-dash", "a" * 65, "ns/x", "é"],
)
def test_bad_namespace_refused(namespace):
    with pytest.raises(ConfigError, match="DELAYQ_NAMESPACE"):
        Settings.from_env({"DELAYQ_NAMESPACE": namespace})


@pytest.mark.parametrize("namespace", ["a", "A9", "delayq", "prod:eu.1_x-y", "a" * 64])
def test_good_namespace(namespace):
    assert Settings.from_env({"DELAYQ_NAMESPACE": namespace}).namespace == namespace


# ----------------------------------------------------------------------------- DELAYQ_TOPICS


def check_topics(topics: Topics) -> None:
    assert set(topics) == {"orders", "*"}
    orders = topics["orders"]
    assert orders.target == "python:app.jobs:order"
    assert orders.timeout == 10
    assert orders.timeout_ms == 10_000
    assert orders.retries == 5
    assert orders.backoff == (1, 2.5)
    assert orders.backoff_csv == "1000,2500"
    assert orders.batch == 100
    assert orders.concurrency == 8
    wildcard = topics["*"]
    assert wildcard.target == "https://example.com/hook"
    assert wildcard.timeout == 30
    assert wildcard.retries == 2
    assert wildcard.backoff == DEFAULT_BACKOFF_S
    assert wildcard.allow_http is False
    assert wildcard.allow_private is False
    assert topics.named == ("orders",)
    assert topics.has_wildcard


def test_topics_as_json():
    settings = Settings.from_env({"DELAYQ_TOPICS": json.dumps(TOPICS)})
    check_topics(settings.topics)


def test_topics_as_file(tmp_path):
    path = tmp_path / "topics.json"
    path.write_text(json.dumps(TOPICS), encoding="utf-8")
    settings = Settings.from_env({"DELAYQ_TOPICS": f"@{path}"})
    check_topics(settings.topics)


def test_topics_file_missing(tmp_path):
    path = tmp_path / "nope.json"
    with pytest.raises(ConfigError, match="DELAYQ_TOPICS: cannot read") as info:
        Settings.from_env({"DELAYQ_TOPICS": f"@{path}"})
    assert str(path) in info.value.message


def test_topics_file_not_json(tmp_path):
    path = tmp_path / "topics.json"
    path.write_text("orders: {target: x}", encoding="utf-8")
    with pytest.raises(ConfigError, match="DELAYQ_TOPICS is not valid JSON"):
        Settings.from_env({"DELAYQ_TOPICS": f"@{path}"})


def test_topics_empty_means_none():
    assert len(Settings.from_env({"DELAYQ_TOPICS": ""}).topics) == 0
    assert len(Topics.parse(None)) == 0
    assert len(Topics.parse("")) == 0
    assert len(Topics.parse("{}")) == 0


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{", "DELAYQ_TOPICS is not valid JSON"),
        ("not json", "DELAYQ_TOPICS is not valid JSON"),
        ("[1, 2]", "DELAYQ_TOPICS must be a JSON object"),
        ('"orders"', "DELAYQ_TOPICS must be a JSON object"),
        ("42", "DELAYQ_TOPICS must be a JSON object"),
        ('{"bad name": {"target": "x"}}', "DELAYQ_TOPICS: 'bad name' is not a valid topic name"),
        ('{"_private": {"target": "x"}}', "DELAYQ_TOPICS: '_private' is not a valid topic name"),
        ('{"a{b}": {"target": "x"}}', "DELAYQ_TOPICS: 'a{b}' is not a valid topic name"),
        ('{"": {"target": "x"}}', "DELAYQ_TOPICS: '' is not a valid topic name"),
        ('{"**": {"target": "x"}}', "DELAYQ_TOPICS: '\\*\\*' is not a valid topic name"),
        ('{"orders": {"target": "x", "bogus": 1}}', "topic 'orders': bogus: Extra inputs are not permitted"),
        ('{"orders": {"target": "x", "timout": 5}}', "topic 'orders': timout: Extra inputs are not permitted"),
        ('{"orders": {}}', "topic 'orders': target: Field required"),
        ('{"orders": {"target": ""}}', "topic 'orders': target:"),
        ('{"orders": "python:a:b"}', "topic 'orders': "),
        ('{"orders": {"target": "x", "timeout": 0}}', "topic 'orders': timeout: .*greater than or equal to 1"),
        ('{"orders": {"target": "x", "timeout": 901}}', "topic 'orders': timeout: .*less than or equal to 900"),
        ('{"orders": {"target": "x", "timeout": "30"}}', "topic 'orders': timeout:"),
        ('{"orders": {"target": "x", "retries": 26}}', "topic 'orders': retries:"),
        ('{"orders": {"target": "x", "retries": -1}}', "topic 'orders': retries:"),
        ('{"orders": {"target": "x", "retries": 2.5}}', "topic 'orders': retries:"),
        ('{"orders": {"target": "x", "retries": true}}', "topic 'orders': retries:"),
        ('{"orders": {"target": "x", "backoff": []}}', "topic 'orders': backoff: .*at least 1 item"),
        ('{"orders": {"target": "x", "backoff": [-1]}}', "topic 'orders': backoff: .*between 0 and 366 days"),
        ('{"orders": {"target": "x", "backoff": [31622401]}}', "topic 'orders': backoff: .*between 0 and 366 days"),
        ('{"orders": {"target": "x", "backoff": ["15"]}}', "topic 'orders': backoff.0:"),
        ('{"orders": {"target": "x", "backoff": 15}}', "topic 'orders': backoff:"),
        ('{"orders": {"target": "x", "batch": 0}}', "topic 'orders': batch:"),
        ('{"orders": {"target": "x", "batch": 1001}}', "topic 'orders': batch:"),
        ('{"orders": {"target": "x", "concurrency": 0}}', "topic 'orders': concurrency:"),
        ('{"orders": {"target": "x", "rate": 0}}', "topic 'orders': rate: .*greater than or equal to 0.0001"),
        ('{"orders": {"target": "x", "rate": -5}}', "topic 'orders': rate:"),
        ('{"orders": {"target": "x", "rate": 100001}}', "topic 'orders': rate: .*less than or equal"),
        ('{"orders": {"target": "x", "rate": "50"}}', "topic 'orders': rate:"),
        ('{"orders": {"target": "x", "rate": 50, "burst": 0}}', "topic 'orders': burst:"),
        ('{"orders": {"target": "x", "rate": 50, "burst": 2.5}}', "topic 'orders': burst:"),
        ('{"orders": {"target": "x", "burst": 10}}', "topic 'orders': burst: .*needs a rate"),
        ('{"*": {"target": "x", "timeout": 1000}}', "topic '\\*': timeout:"),
        ('{"orders": {"target": "x", "keep_done": -1}}', "topic 'orders': keep_done: .*greater than or equal to 0"),
        ('{"orders": {"target": "x", "keep_done": 31622401}}', "topic 'orders': keep_done: .*less than or equal"),
        ('{"orders": {"target": "x", "keep_done": 1.5}}', "topic 'orders': keep_done:"),
        ('{"orders": {"target": "x", "keep_done": "3600"}}', "topic 'orders': keep_done:"),
        ('{"orders": {"target": "x", "keep_done_max": 0}}', "topic 'orders': keep_done_max: .*greater than or equal"),
        ('{"orders": {"target": "x", "keep_done_max": 10000001}}', "topic 'orders': keep_done_max:"),
    ],
)
def test_bad_topics(raw, message):
    with pytest.raises(ConfigError, match=message) as info:
        Settings.from_env({"DELAYQ_TOPICS": raw})
    assert info.value.message.startswith("DELAYQ_TOPICS")


def test_receipts_config_defaults_and_values():
    topics = Topics.parse('{"a": {"target": "x"}, "b": {"target": "x", "keep_done": 0, "keep_done_max": 5}}')
    assert (topics["a"].keep_done, topics["a"].keep_done_ms, topics["a"].keep_done_max) == (3600, 3_600_000, 10_000)
    assert (topics["b"].keep_done_ms, topics["b"].keep_done_max) == (0, 5)


def test_topics_parse_mapping():
    topics = Topics.parse(TOPICS)
    check_topics(topics)
    assert Topics.parse(topics.configs) == topics


def test_topic_config_bounds_accepted():
    config = TopicConfig(target="x", timeout=900, retries=25, backoff=(0, 366 * 86400), batch=1000, concurrency=1024)
    assert config.timeout_ms == 900_000
    assert config.backoff_csv == f"0,{366 * 86_400_000}"
    assert TopicConfig(target="x", timeout=1, retries=0).timeout_ms == 1000
    assert TopicConfig(target="x", timeout=0.5 + 1).timeout_ms == 1500


@pytest.mark.parametrize(
    ("rate", "burst", "partitions", "share"),
    [
        (None, None, 4, None),
        (50, None, 1, (20_000, 1_000_000)),  # a start every 20 ms, 50 at once
        (50, None, 4, (80_000, 1_000_000)),  # each partition a quarter: every 80 ms, 12.5 at once
        (50, 10, 1, (20_000, 200_000)),
        (3, None, 1, (333_334, 1_000_002)),  # the interval rounded up, the burst kept whole
        (0.5, 1, 2, (4_000_000, 4_000_000)),  # a burst below one start per partition holds one
        (100_000, 100_000, 1, (10, 1_000_000)),
    ],
)
def test_rate_share(rate, burst, partitions, share):
    config = TopicConfig(target="x", rate=rate, burst=burst)
    assert config.rate_share(partitions) == share


@pytest.mark.parametrize("partitions", [1, 2, 3, 7, 16])
@pytest.mark.parametrize(("rate", "burst"), [(50, 50), (50, 5), (3, 3), (0.5, 2), (1000, 1)])
def test_rate_shares_never_exceed_the_rate(rate, burst, partitions):
    """In any window of W seconds a partition's bucket starts at most tolerance/interval + W/interval
    jobs; over all partitions that stays within rate * W + burst (a burst below one start per
    partition rounds up to one each)."""
    interval, tolerance = TopicConfig(target="x", rate=rate, burst=burst).rate_share(partitions)
    for window_s in (0, 1, 10):
        most = partitions * ((window_s * 1_000_000 + tolerance) // interval)
        assert most <= rate * window_s + max(burst, partitions)


def test_topic_config_is_frozen():
    config = TopicConfig(target="x")
    with pytest.raises(ValidationError, match="frozen"):
        config.timeout = 5  # type: ignore[misc]


# ----------------------------------------------------------------------------- Topics.for_topic


def test_for_topic_own_config_else_wildcard():
    topics = Topics.parse(TOPICS)
    assert topics.for_topic("orders") is topics["orders"]
    assert topics.for_topic("reminders") is topics["*"]
    assert topics.for_topic("anything-else") is topics["*"]
    assert topics.for_topic("*") is topics["*"]


def test_for_topic_without_wildcard():
    topics = Topics.parse({"orders": {"target": "x"}})
    assert topics.for_topic("orders") is topics["orders"]
    assert topics.for_topic("reminders") is None
    assert not topics.has_wildcard
    assert topics.named == ("orders",)


def test_for_topic_only_wildcard():
    topics = Topics.parse({"*": {"target": "x", "retries": 0}})
    assert topics.for_topic("orders") is topics["*"]
    assert topics.for_topic("orders").retries == 0
    assert topics.named == ()


# ----------------------------------------------------------------------------- overrides


def test_explicit_overrides_win_over_the_environment():
    env = {
        "DELAYQ_REDIS_URL": "redis://env:6379/0",
        "DELAYQ_REDIS_MODE": "cluster",
        "DELAYQ_NAMESPACE": "from-env",
        "DELAYQ_PARTITIONS": "8",
        "DELAYQ_TOPICS": json.dumps({"env-topic": {"target": "x"}}),
        "DELAYQ_TICK": "2",
        "DELAYQ_LOOP_SECONDS": "30",
        "DELAYQ_WEBHOOK_SECRET": "env-secret",
    }
    settings = Settings.from_env(
        env,
        redis_url="redis://explicit:6379/1",
        redis_mode="standalone",
        namespace="explicit",
        partitions=3,
        topics={"explicit-topic": {"target": "y"}},
        tick=0.5,
        loop_seconds=10,
        webhook_secret="explicit-secret",
    )
    assert settings.redis_url == "redis://explicit:6379/1"
    assert settings.redis_mode == "standalone"
    assert settings.namespace == "explicit"
    assert settings.partitions == 3
    assert settings.topics.named == ("explicit-topic",)
    assert settings.tick == 0.5
    assert settings.loop_seconds == 10
    assert settings.webhook_secret == "explicit-secret"


def test_override_some_keeps_the_rest_from_the_environment():
    env = {"DELAYQ_NAMESPACE": "from-env", "DELAYQ_PARTITIONS": "8"}
    settings = Settings.from_env(env, partitions=2)
    assert settings.namespace == "from-env"
    assert settings.partitions == 2


def test_topics_override_as_json_string_or_topics():
    as_text = Settings.from_env({}, topics=json.dumps(TOPICS)).topics
    as_topics = Settings.from_env({}, topics=Topics.parse(TOPICS)).topics
    check_topics(as_text)
    assert as_text == as_topics


def test_overrides_are_validated():
    with pytest.raises(ConfigError, match="DELAYQ_PARTITIONS"):
        Settings.from_env({}, partitions=0)
    with pytest.raises(ConfigError, match="DELAYQ_NAMESPACE"):
        Settings.from_env({}, namespace="a{b}")


def test_with_changes_a_copy():
    settings = Settings.from_env({"DELAYQ_NAMESPACE": "one"})
    changed = settings.with_(namespace="two", partitions=4)
    assert settings.namespace == "one"
    assert settings.partitions == 1
    assert changed.namespace == "two"
    assert changed.partitions == 4
    with pytest.raises(ConfigError):
        settings.with_(tick=0)


# ----------------------------------------------------------------------------- secrets


def test_repr_hides_secrets():
    settings = Settings.from_env(
        {
            "DELAYQ_REDIS_URL": "rediss://default:hunter2-password@cache.example.com:6380/0",
            "DELAYQ_WEBHOOK_SECRET": "whsec-0123456789",
            "DELAYQ_UI_TOKEN": "uitok-0123456789",
            "DELAYQ_NAMESPACE": "visible-ns",
            "DELAYQ_TOPICS": json.dumps(TOPICS),
        }
    )
    for text in (repr(settings), str(settings), f"{settings}", f"{settings!r}"):
        assert "hunter2-password" not in text
        assert "whsec-0123456789" not in text
        assert "uitok-0123456789" not in text
        assert "visible-ns" in text
    # the values are still there for the code that needs them
    assert "hunter2-password" in settings.redis_url
    assert settings.webhook_secret == "whsec-0123456789"


def test_repr_hides_secrets_after_with():
    settings = Settings().with_(redis_url="redis://:pw-abc123@h:6379/0", webhook_secret="whsec-xyz")
    assert "pw-abc123" not in repr(settings)
    assert "whsec-xyz" not in repr(settings)


# ----------------------------------------------------------------------------- trailing newline


def test_namespace_with_a_trailing_newline_refused():
    """``NAMESPACE_RE.match`` with a pattern ending in ``$`` accepts ``"delayq\\n"`` (a newline in every key)."""
    with pytest.raises(ConfigError, match="DELAYQ_NAMESPACE"):
        Settings.from_env({"DELAYQ_NAMESPACE": "delayq\n"})


def test_topic_name_with_a_trailing_newline_refused():
    """``TOPIC_RE.match`` accepts ``"orders\\n"`` as a topic name in ``DELAYQ_TOPICS``."""
    with pytest.raises(ConfigError, match="is not a valid topic name"):
        Settings.from_env({"DELAYQ_TOPICS": json.dumps({"orders\n": {"target": "x"}})})


def test_a_create_waits_for_its_replicas_less_than_a_connection_waits_for_an_answer():
    """A WAIT answered after the socket timeout would read as a server that hangs (a 503)."""
    assert MAX_REPLICAS_WAIT_MS + 1000 <= SOCKET_TIMEOUT_S * 1000


# ------------------------------------------------------------------------------------- callbacks


@pytest.mark.parametrize(
    ("topics", "message"),
    [
        ({"a": {"on_done": "a"}}, "callbacks loop: a on_done -> a"),
        ({"a": {"on_done": "b"}, "b": {"on_dead": "a"}}, "callbacks loop: a on_done -> b, b on_dead -> a"),
        (
            {"a": {"on_done": "b"}, "b": {"on_done": "c"}, "c": {"on_dead": "b"}},
            "callbacks loop: b on_done -> c, c on_dead -> b",
        ),
        ({"*": {"on_dead": "dlq"}}, "callbacks loop: * on_dead -> dlq"),  # dlq is one of *'s
        ({"*": {"on_done": "a"}, "a": {"on_dead": "z"}}, "callbacks loop: * on_done -> a, a on_dead -> z"),
        ({"a": {"on_done": "nowhere"}}, "topic 'a': on_done names 'nowhere', which has no config"),
        ({"a": {"on_dead": "*"}}, "topic 'a': on_dead: String should match pattern"),
    ],
)
def test_callbacks_that_loop_or_lead_nowhere_are_refused_naming_the_topics(
    topics: dict[str, dict[str, str]], message: str
) -> None:
    raw = {name: {"target": "python:m:f", **config} for name, config in topics.items()}
    with pytest.raises(ConfigError, match=re.escape(message)):
        Topics.parse(raw)


def test_callbacks_that_end_are_accepted() -> None:
    raw = {
        "orders": {"target": "python:m:f", "on_done": "invoices", "on_dead": "alerts"},
        "invoices": {"target": "python:m:f", "on_dead": "alerts"},
        "alerts": {"target": "https://hooks.example.com/x"},
        "*": {"target": "python:m:f", "on_dead": "alerts"},
    }
    topics = Topics.parse(raw)
    assert (topics["orders"].on_done, topics["orders"].on_dead) == ("invoices", "alerts")
    assert topics.retrying("anything").on_dead == "alerts"  # * covers it
