"""infra/template.yaml: cfn-lint clean, transformed offline by the SAM translator under each of its
conditions, and the transformed resources are what the contract and the README promise.

The translator runs as CloudFormation runs it at deploy time (``samtranslator``'s ``transform`` with
the parameter values), on the template as ``sam package`` leaves it (CodeUri an S3 URI). A small
evaluator then keeps the resources whose Condition holds for the parameters and resolves ``Fn::If``,
``Ref`` to parameters and ``AWS::NoValue``, so each scenario is checked as the stack it deploys.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from cfnlint.api import ManualArgs, lint_file
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

from delayq.core.loop import FINISH_BEFORE_DEADLINE_S, STOP_BEFORE_DEADLINE_S
from delayq.core.settings import Settings, TopicConfig
from delayq.store.queue import Queue
from delayq.surfaces.api import create_app

from support.security import ACL_COMMANDS  # the ACL the security tier proves sufficient

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "infra" / "template.yaml"
TOPIC_POLICY = ROOT / "infra" / "policies" / "topic-caller.json"

FUNCTIONS = ROOT / "functions"
EVENTS = ROOT / "events"

ACCOUNT = "123456789012"
REDIS_SECRET = f"arn:aws:secretsmanager:eu-west-1:{ACCOUNT}:secret:delayq-redis-AbCdEf"
WEBHOOK_SECRET = f"arn:aws:secretsmanager:eu-west-1:{ACCOUNT}:secret:delayq-webhook-AbCdEf"
QUEUE = f"arn:aws:sqs:eu-west-1:{ACCOUNT}:orders-due"
QUEUE_2 = f"arn:aws:sqs:eu-west-1:{ACCOUNT}:reminders-due.fifo"
FUNCTION = f"arn:aws:lambda:eu-west-1:{ACCOUNT}:function:close-order"
SNS_TOPIC = f"arn:aws:sns:eu-west-1:{ACCOUNT}:rider-texts"
EVENT_BUS = f"arn:aws:events:eu-west-1:{ACCOUNT}:event-bus/shop"
TOPICS = {"orders": {"target": QUEUE, "timeout": 10}, "*": {"target": "python:shop.jobs:log_and_drop"}}
IN_VPC = {"SubnetIds": "subnet-0123456789abcdef0,subnet-0fedcba9876543210", "SecurityGroupIds": "sg-0123456789abcdef0"}
LOOP_SECONDS = 55.0
LAMBDA_MAX_TIMEOUT = 900
API_GATEWAY_MAX_TIMEOUT = 29
FUNCTION_IDS = ("Enqueue", "Sweep", "Consume")
LOOP_IDS = ("Sweep", "Consume")
FUNCTION_ROLES = tuple(f"{name}Role" for name in FUNCTION_IDS)
METRICS = (
    "Enqueued",
    "Moved",
    "Delivered",
    "Failed",
    "Retried",
    "Dead",
    "LeaseExpired",
    "TimedOut",
    "Lateness",
    "RedisErrors",
)
TARGET_PARAMETERS = {
    "LambdaTargetArns": ("lambda:InvokeFunction", FUNCTION),
    "QueueTargetArns": ("sqs:SendMessage", QUEUE),
    "TopicTargetArns": ("sns:Publish", SNS_TOPIC),
    "EventBusTargetArns": ("events:PutEvents", EVENT_BUS),
}
NO_VALUE = object()

# Each scenario flips conditions of the template; the defaults one creates the cache without a VPC,
# which the template's Rules refuse (see test_rules_refuse_a_cache_without_network).
SCENARIOS: dict[str, dict[str, str]] = {
    "defaults": {},
    "created-cache": {**IN_VPC},
    "existing-secret": {"RedisSecretArn": REDIS_SECRET},
    "existing-secret-cluster-in-vpc": {"RedisSecretArn": REDIS_SECRET, "RedisMode": "cluster", **IN_VPC},
    "api-key": {"RedisSecretArn": REDIS_SECRET, "ApiAuth": "API_KEY"},
    "http-api": {"RedisSecretArn": REDIS_SECRET, "ApiType": "HTTP"},
    "http-api-created-cache-targets": {"ApiType": "HTTP", "WebhookSecretArn": WEBHOOK_SECRET, **IN_VPC},
    "rest-existing-logs-role": {"RedisSecretArn": REDIS_SECRET, "RestApiCloudWatchRole": "existing"},
    "targets": {
        "RedisSecretArn": REDIS_SECRET,
        "WebhookSecretArn": WEBHOOK_SECRET,
        "AlarmTopicArn": SNS_TOPIC,
        **{name: arn for name, (_, arn) in TARGET_PARAMETERS.items()},
    },
    "api-key-created-cache-targets": {
        "ApiAuth": "API_KEY",
        "QueueTargetArns": f"{QUEUE},{QUEUE_2}",
        **IN_VPC,
    },
}


# ------------------------------------------------------------------------------------------ helpers


class StubPolicyLoader:
    """The translator's managed-policy loader, offline: the template names no SAM policy template."""

    def load(self) -> dict[str, str]:
        return {}


def load_template() -> dict[str, Any]:
    return yaml_parse(TEMPLATE.read_text(encoding="utf-8"))


@dataclass
class Stack:
    """A transformed template as deployed with ``values``: only the resources whose Condition holds,
    with ``Fn::If``, ``Ref`` to parameters and ``AWS::NoValue`` resolved."""

    template: dict[str, Any]
    values: dict[str, Any]

    @classmethod
    def of(cls, template: dict[str, Any], given: dict[str, str]) -> Stack:
        values: dict[str, Any] = {}
        for name, spec in template["Parameters"].items():
            raw = given.get(name, spec.get("Default"))
            if raw is None:
                continue
            raw = str(raw)  # Ref to a parameter is a string, whatever its type
            values[name] = raw.split(",") if spec["Type"] == "CommaDelimitedList" else raw
        return cls(template, values)

    def holds(self, condition: str) -> bool:
        return bool(self.evaluate(self.template["Conditions"][condition]))

    def evaluate(self, node: Any) -> Any:
        """The value of a condition or rule expression."""
        if isinstance(node, dict) and len(node) == 1:
            ((key, arg),) = node.items()
            operator = CONDITION_FUNCTIONS.get(key)
            if operator is not None:
                return operator(self, arg)
        return self.resolve(node)

    def resolve(self, node: Any) -> Any:
        """``node`` with ``Fn::If``, ``Ref`` to parameters, ``Fn::Join`` of known strings and
        ``AWS::NoValue`` (dropped) resolved; other intrinsic functions are kept as they are."""
        if isinstance(node, list):
            return [item for item in (self.resolve(item) for item in node) if item is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            ((key, arg),) = node.items()
            if key == "Fn::If":
                return self.resolve(arg[1] if self.holds(arg[0]) else arg[2])
            if key == "Ref" and (arg == "AWS::NoValue" or arg in self.values):
                return NO_VALUE if arg == "AWS::NoValue" else self.values[arg]
            joined = self.resolve(arg[1]) if key == "Fn::Join" else None
            if isinstance(joined, list) and all(isinstance(part, str) for part in joined):
                return arg[0].join(joined)
        resolved = {key: self.resolve(value) for key, value in node.items()}
        return {key: value for key, value in resolved.items() if value is not NO_VALUE}

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        return {
            name: self.resolve(resource)
            for name, resource in self.template["Resources"].items()
            if "Condition" not in resource or self.holds(resource["Condition"])
        }

    def of_type(self, kind: str) -> dict[str, dict[str, Any]]:
        return {name: resource for name, resource in self.resources.items() if resource["Type"] == kind}

    def props(self, name: str) -> dict[str, Any]:
        return self.resources[name]["Properties"]

    @property
    def outputs(self) -> dict[str, Any]:
        return {
            name: self.resolve(output)
            for name, output in self.template["Outputs"].items()
            if "Condition" not in output or self.holds(output["Condition"])
        }


CONDITION_FUNCTIONS: dict[str, Callable[[Stack, Any], bool]] = {
    "Fn::Equals": lambda stack, arg: stack.evaluate(arg[0]) == stack.evaluate(arg[1]),
    "Fn::Not": lambda stack, arg: not stack.evaluate(arg[0]),
    "Fn::And": lambda stack, arg: all(stack.evaluate(item) for item in arg),
    "Fn::Or": lambda stack, arg: any(stack.evaluate(item) for item in arg),
    "Fn::Contains": lambda stack, arg: stack.evaluate(arg[1]) in stack.evaluate(arg[0]),  # in Rules
    "Condition": lambda stack, arg: stack.holds(arg),
}


@cache
def _translated(items: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    template = load_template()
    template["Globals"]["Function"]["CodeUri"] = "s3://delayq-artifacts/functions.zip"  # as sam package leaves it
    return transform(template, dict(items), StubPolicyLoader())


@pytest.fixture(scope="module")
def translate() -> Iterator[Any]:
    """``translate(**parameters)``: the transformed template as a ``Stack`` (Topics given by default)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_DEFAULT_REGION", "eu-west-1")  # the translator's pseudo parameters

        def run(**given: str) -> Stack:
            values = {"Topics": json.dumps(TOPICS), **given}
            return Stack.of(_translated(tuple(sorted(values.items()))), values)

        yield run


@pytest.fixture(params=sorted(SCENARIOS))
def scenario(request: pytest.FixtureRequest, translate: Any) -> tuple[str, Stack]:
    return request.param, translate(**SCENARIOS[request.param])


def statements(stack: Stack, only: tuple[str, ...] = ()) -> Iterator[tuple[str, dict[str, Any]]]:
    """(resource name, statement) of every IAM policy document in the stack (or in the resources ``only``)."""
    for name, resource in stack.resources.items():
        if only and name not in only:
            continue
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::IAM::Role":
            documents = [policy["PolicyDocument"] for policy in props.get("Policies", [])]
        elif resource["Type"] in ("AWS::IAM::ManagedPolicy", "AWS::IAM::Policy"):
            documents = [props["PolicyDocument"]]
        else:
            continue
        for document in documents:
            for statement in document["Statement"]:
                yield name, statement


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def sub_placeholders(text: str, values: dict[str, Any] | None = None) -> str:
    """A ``Fn::Sub`` string with each ``${Name}`` replaced by the parameter's value in ``values``, or by a
    plain placeholder (``XName``, ``XResource_Attribute``) for anything else."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if values and isinstance(values.get(name), str):
            return str(values[name])
        return "X" + re.sub(r"\W", "_", name)

    return re.sub(r"\$\{([^}!]+)\}", replace, text)


PSEUDO = {
    "AWS::Partition": "aws",
    "AWS::Region": "eu-west-1",
    "AWS::AccountId": ACCOUNT,
    "AWS::URLSuffix": "amazonaws.com",
    "AWS::StackId": f"arn:aws:cloudformation:eu-west-1:{ACCOUNT}:stack/Shop-Q/51af3dc0-da77-11e4-872e-1234567db123",
}


def render(node: Any, stack: Stack) -> Any:  # noqa: PLR0911 - one return per intrinsic function
    """``node`` as text: parameters and pseudo parameters by value, a resource's ``Ref`` as
    ``<Name>``, a ``GetAtt`` as ``<Name.Attribute>``; ``Fn::Sub``, ``Join``, ``Split``, ``Select``
    evaluated."""
    if isinstance(node, list):
        return [render(item, stack) for item in node]
    if not isinstance(node, dict) or len(node) != 1:
        return node
    ((key, arg),) = node.items()
    if key == "Ref":
        return stack.values.get(arg, PSEUDO.get(arg, f"<{arg}>"))
    if key == "Fn::GetAtt":
        return f"<{'.'.join(arg)}>"
    if key == "Fn::Sub":
        text, names = (arg, {}) if isinstance(arg, str) else (arg[0], render(arg[1], stack))

        def value(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in names:
                return str(names[name])
            return str(render({"Fn::GetAtt": name.split(".")} if "." in name else {"Ref": name}, stack))

        return re.sub(r"\$\{([^}!]+)\}", value, text)
    if key == "Fn::Join":
        return arg[0].join(render(arg[1], stack))
    if key == "Fn::Split":
        return render(arg[1], stack).split(arg[0])
    if key == "Fn::Select":
        return render(arg[1], stack)[int(arg[0])]
    return {key: render(arg, stack)}


def iam_allows(patterns: list[str], arn: str) -> bool:
    """Whether an IAM resource list allows ``arn``: ``*`` matches any run of characters (``/`` too),
    ``?`` one character."""
    return any(re.fullmatch(re.escape(p).replace(r"\*", ".*").replace(r"\?", "."), arn) for p in patterns)


def role_of(stack: Stack, function: str) -> str:
    role = stack.props(function)["Role"]
    assert role == {"Fn::GetAtt": [f"{function}Role", "Arn"]}
    return f"{function}Role"


# ------------------------------------------------------------------------------------- lint, transform


def test_cfn_lint_reports_nothing() -> None:
    matches = lint_file(TEMPLATE, ManualArgs(regions=["eu-west-1", "us-east-1"]))
    assert [str(match) for match in matches] == []


def test_every_scenario_transforms(scenario: tuple[str, Stack]) -> None:
    name, stack = scenario
    assert stack.template["Resources"], name
    sam_types = {r["Type"] for r in stack.template["Resources"].values() if r["Type"].startswith("AWS::Serverless")}
    assert sam_types == set()


def test_resources_of_the_defaults(translate: Any) -> None:
    kinds = sorted(r["Type"] for r in translate().resources.values())
    assert kinds.count("AWS::Lambda::Function") == 3
    assert kinds.count("AWS::Scheduler::Schedule") == 3  # consume's second run among them, disabled
    assert kinds.count("AWS::Lambda::EventInvokeConfig") == 2
    assert kinds.count("AWS::ApiGateway::RestApi") == 1
    assert kinds.count("AWS::ApiGatewayV2::Api") == 0
    assert kinds.count("AWS::ApiGateway::Account") == 1
    assert kinds.count("AWS::Logs::LogGroup") == 4  # the functions' and the API's access logs
    assert kinds.count("AWS::CloudWatch::Dashboard") == 1
    assert kinds.count("AWS::CloudWatch::Alarm") >= 5
    assert kinds.count("AWS::ElastiCache::ServerlessCache") == 1
    assert kinds.count("AWS::ElastiCache::User") == 2
    assert kinds.count("AWS::ElastiCache::UserGroup") == 1
    assert kinds.count("AWS::SecretsManager::Secret") == 2  # the functions' user's, the disabled default's


def test_rules_refuse_a_cache_without_network(translate: Any) -> None:
    def broken(stack: Stack) -> list[str]:
        failed = []
        for name, rule in stack.template["Rules"].items():
            if "RuleCondition" in rule and not stack.evaluate(rule["RuleCondition"]):
                continue
            failed += [
                f"{name}: {a['AssertDescription']}" for a in rule["Assertions"] if not stack.evaluate(a["Assert"])
            ]
        return failed

    assert len(broken(translate())) == 2  # no subnets, no security groups
    assert broken(translate(SubnetIds=IN_VPC["SubnetIds"])) != []
    for name in set(SCENARIOS) - {"defaults"}:
        assert broken(translate(**SCENARIOS[name])) == [], name
    http_with_keys = broken(translate(RedisSecretArn=REDIS_SECRET, ApiType="HTTP", ApiAuth="API_KEY"))
    assert len(http_with_keys) == 1
    assert "ApiType REST" in http_with_keys[0]


# ------------------------------------------------------------------------------------------ functions


def test_functions_and_their_handlers(scenario: tuple[str, Stack]) -> None:
    _, stack = scenario
    functions = stack.of_type("AWS::Lambda::Function")
    assert sorted(functions) == sorted(FUNCTION_IDS)
    for name, resource in functions.items():
        props = resource["Properties"]
        assert props["Handler"] == f"{name.lower()}.lambda_handler"
        assert props["Runtime"] == "python3.12"
        assert props["Architectures"] == ["arm64"]
        assert props["MemorySize"] == "256"
        assert props["TracingConfig"] == {"Mode": "Active"}
        assert props["FunctionName"] == {"Fn::Sub": f"${{AWS::StackName}}-{name.lower()}"}


def test_timeouts_exceed_the_loop_and_stay_within_lambda_limits(translate: Any) -> None:
    stack = translate()
    parameter = stack.template["Parameters"]["ConsumeTimeout"]
    assert stack.template["Resources"]["Consume"]["Properties"]["Timeout"] == {"Ref": "ConsumeTimeout"}
    assert stack.props("Consume")["Timeout"] == str(parameter["Default"])
    timeouts = {
        "Sweep": [stack.props("Sweep")["Timeout"]],
        "Consume": [parameter["Default"], parameter["MinValue"], parameter["MaxValue"]],
    }
    for name, values in timeouts.items():
        env = stack.props(name)["Environment"]["Variables"]
        loop = float(env["DELAYQ_LOOP_SECONDS"])
        assert loop == LOOP_SECONDS
        for timeout in values:
            assert loop + STOP_BEFORE_DEADLINE_S < float(timeout) <= LAMBDA_MAX_TIMEOUT, name
    assert float(stack.props("Enqueue")["Timeout"]) <= API_GATEWAY_MAX_TIMEOUT
    # At the default timeout, the end of a consume loop still fits a job of the default topic timeout.
    assert float(parameter["Default"]) - LOOP_SECONDS - FINISH_BEFORE_DEADLINE_S >= TopicConfig(target="x").timeout


def test_the_sweeper_runs_alone(translate: Any) -> None:
    stack = translate()
    assert stack.props("Sweep")["ReservedConcurrentExecutions"] == 1
    assert "ReservedConcurrentExecutions" not in stack.props("Consume")


def test_schedules_every_minute_with_the_sample_event_shape(translate: Any) -> None:
    stack = translate()
    schedules = stack.of_type("AWS::Scheduler::Schedule")
    targets = {}
    for resource in schedules.values():
        props = resource["Properties"]
        assert props["ScheduleExpression"] == "rate(1 minute)"
        assert props["FlexibleTimeWindow"] == {"Mode": "OFF"}
        target = props["Target"]
        function = target["Arn"]["Fn::GetAtt"][0]
        targets[function] = props
        assert target["RetryPolicy"]["MaximumEventAgeInSeconds"] == 60
        event = json.loads(sub_placeholders(target["Input"]["Fn::Sub"]))
        sample = json.loads((EVENTS / f"{function.lower()}.json").read_text())
        assert sorted(event) == sorted(sample)
        assert event["detail-type"] == sample["detail-type"] == "Scheduled Event"
        assert event["source"] == sample["source"]
        assert event["detail"] == {}
        assert "seconds" not in json.dumps(event)  # loop DELAYQ_LOOP_SECONDS, bounded by the deadline
        second = "-2" if props["Name"]["Fn::Sub"].endswith("-2") else ""
        assert props["Name"] == {"Fn::Sub": f"${{AWS::StackName}}-{function.lower()}{second}"}
    assert sorted(targets) == sorted(LOOP_IDS)


def enabled_schedules(stack: Stack) -> list[str]:
    """The names of the schedules that run, each as ``<function>`` or ``<function>-2``."""
    return sorted(
        props["Name"]["Fn::Sub"].removeprefix("${AWS::StackName}-")
        for props in (r["Properties"] for r in stack.of_type("AWS::Scheduler::Schedule").values())
        if props.get("State", "ENABLED") == "ENABLED"
    )


def test_one_consume_run_by_default_two_with_consume_runs_2(translate: Any) -> None:
    """ConsumeRuns 2 enables a second consume schedule: two runs at once, for bursts of quick jobs.
    The sweeper stays one (its reserved concurrency), whatever this says."""
    assert enabled_schedules(translate()) == ["consume", "sweep"]
    two = translate(ConsumeRuns="2")
    assert enabled_schedules(two) == ["consume", "consume-2", "sweep"]
    targets = [r["Properties"]["Target"]["Arn"] for r in two.of_type("AWS::Scheduler::Schedule").values()]
    assert targets.count({"Fn::GetAtt": ["Consume", "Arn"]}) == 2
    assert two.props("Sweep")["ReservedConcurrentExecutions"] == 1


def test_failed_or_stale_loop_runs_are_not_retried(translate: Any) -> None:
    stack = translate()
    configs = {
        r["Properties"]["FunctionName"]["Ref"]: r["Properties"]
        for r in stack.of_type("AWS::Lambda::EventInvokeConfig").values()
    }
    assert sorted(configs) == sorted(LOOP_IDS)
    for props in configs.values():
        assert props["MaximumRetryAttempts"] == 0
        assert props["MaximumEventAgeInSeconds"] == 60


def test_environment_matches_the_settings(scenario: tuple[str, Stack]) -> None:
    name, stack = scenario
    given = SCENARIOS[name]
    creates_cache = "RedisSecretArn" not in given
    for function in FUNCTION_IDS:
        env = stack.props(function)["Environment"]["Variables"]
        assert env["DELAYQ_REDIS_SECRET"] == ({"Ref": "RedisSecret"} if creates_cache else REDIS_SECRET)
        if creates_cache:  # the address here, the user and password in the secret
            assert env["DELAYQ_REDIS_URL"] == {"Fn::Sub": "rediss://${Cache.Endpoint.Address}:${Cache.Endpoint.Port}/0"}
        else:
            assert "DELAYQ_REDIS_URL" not in env  # the URL is in the secret
        assert env["DELAYQ_REDIS_MODE"] == ("cluster" if creates_cache else given.get("RedisMode", "standalone"))
        assert env["DELAYQ_TOPICS"] == json.dumps(TOPICS)
        assert env["POWERTOOLS_SERVICE_NAME"] == {"Ref": "AWS::StackName"}
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == "delayq"
        assert env["POWERTOOLS_TRACER_CAPTURE_RESPONSE"] == "false"  # no job bodies in X-Ray traces
        assert env["LOG_LEVEL"] == "INFO"
        assert ("DELAYQ_LOOP_SECONDS" in env) == (function in LOOP_IDS)
        assert "DELAYQ_WEBHOOK_SECRET" not in env  # a key in the environment is readable by too many
        assert "{{resolve:" not in json.dumps(env)  # nor any secret CloudFormation would resolve into it
        webhook = env.get("DELAYQ_WEBHOOK_SECRET_ID")
        if function == "Consume" and "WebhookSecretArn" in given:
            assert webhook == WEBHOOK_SECRET  # the ARN: consume reads the key at run time
        else:
            assert webhook is None
        # Every value delayq reads is one its settings accept.
        address = {"DELAYQ_REDIS_URL": "rediss://delayq-abc.serverless.euw1.cache.amazonaws.com:6379/0"}
        plain = {key: value if isinstance(value, str) else address.get(key, "x") for key, value in env.items()}
        settings = Settings.from_env(plain)
        assert settings.namespace == "delayq"
        assert settings.partitions == 1
        assert settings.tick == 1.0
        assert settings.topics.for_topic("orders") is not None
        if function in LOOP_IDS:
            assert settings.loop_seconds == LOOP_SECONDS


def test_vpc_config_only_with_subnets(scenario: tuple[str, Stack]) -> None:
    name, stack = scenario
    in_vpc = "SubnetIds" in SCENARIOS[name]
    vpc_access = "arn:${AWS::Partition}:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole"
    for function in FUNCTION_IDS:
        props = stack.props(function)
        if in_vpc:
            assert props["VpcConfig"] == {
                "SubnetIds": IN_VPC["SubnetIds"].split(","),
                "SecurityGroupIds": IN_VPC["SecurityGroupIds"].split(","),
            }
        else:
            assert "VpcConfig" not in props
        managed = stack.props(role_of(stack, function)).get("ManagedPolicyArns", [])
        assert managed == ([{"Fn::Sub": vpc_access}] if in_vpc else [])


def test_handlers_resolve_to_callables_under_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    template = load_template()
    env = {
        "DELAYQ_REDIS_URL": "redis://127.0.0.1:6379/0",  # never connected at import
        "DELAYQ_TOPICS": json.dumps(TOPICS),
        "DELAYQ_LOOP_SECONDS": "55",
        "POWERTOOLS_SERVICE_NAME": "delayq-infra-test",
        "POWERTOOLS_METRICS_NAMESPACE": "delayq",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    handlers = {name: template["Resources"][name]["Properties"]["Handler"] for name in FUNCTION_IDS}
    for name, handler in handlers.items():
        module_name, _, attribute = handler.rpartition(".")
        module = _import_by_path(FUNCTIONS / f"{module_name.replace('.', '/')}.py", f"_infra_handler_{module_name}")
        function = getattr(module, attribute)
        assert callable(function), name
        assert len(inspect.signature(function).parameters) == 2, name  # (event, context)


def _import_by_path(path: Path, name: str) -> ModuleType:
    assert path.is_file(), path
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


# -------------------------------------------------------------------------------------------- the API


API_KINDS = {"REST": "AWS::ApiGateway::RestApi", "HTTP": "AWS::ApiGatewayV2::Api"}


def the_api(stack: Stack) -> tuple[str, dict[str, Any]]:
    """The one API of the stack, as (name, resource)."""
    apis = {name: r for kind in API_KINDS.values() for name, r in stack.of_type(kind).items()}
    assert len(apis) == 1, sorted(apis)
    return next(iter(apis.items()))


def test_one_api_with_auth_on_every_method(scenario: tuple[str, Stack]) -> None:
    name, stack = scenario
    api_key = SCENARIOS[name].get("ApiAuth") == "API_KEY"
    http = SCENARIOS[name].get("ApiType") == "HTTP"
    api, resource = the_api(stack)
    assert api == ("HttpApi" if http else "KeyApi" if api_key else "IamApi")
    assert resource["Type"] == API_KINDS["HTTP" if http else "REST"]
    assert stack.of_type("AWS::ApiGateway::Method") == {}  # every route is in the OpenAPI body
    assert stack.of_type("AWS::ApiGatewayV2::Route") == {}
    body = resource["Properties"]["Body"]
    schemes = body["components"]["securitySchemes"]
    assert list(body["paths"]) == ["/{proxy+}"]  # /health and /openapi.json included; "/" has no method
    operations = [op for path in body["paths"].values() for op in path.values()]
    assert len(operations) == 1
    for operation in operations:
        integration = operation["x-amazon-apigateway-integration"]
        assert integration["type"] == "aws_proxy"
        assert integration.get("payloadFormatVersion") == ("2.0" if http else None)
        requirements = operation["security"]
        assert requirements
        for requirement in requirements:
            for scheme in requirement:
                if api_key:
                    assert schemes[scheme] == {"type": "apiKey", "name": "x-api-key", "in": "header"}
                else:
                    assert schemes[scheme]["x-amazon-apigateway-authtype"] == "awsSigv4"
    permissions = stack.of_type("AWS::Lambda::Permission")
    assert len(permissions) == 1
    source = next(iter(permissions.values()))["Properties"]["SourceArn"]["Fn::Sub"]
    assert source.endswith(f"${{{api}}}/prod/*/*")
    assert ("ApiKeyId" in stack.outputs) == api_key
    assert ("ApiClientPolicyArn" in stack.outputs) == (not api_key)
    assert ("ApiExecuteArn" in stack.outputs) == (not api_key)


def test_the_http_api_type(translate: Any) -> None:
    """ApiType HTTP: an API Gateway HTTP API, payload format 2.0, IAM auth, stage prod, throttled,
    and nothing of the REST API (no account logging role either: HTTP APIs do not need one)."""
    stack = translate(**SCENARIOS["http-api"])
    assert stack.of_type("AWS::ApiGateway::RestApi") == {}
    assert stack.of_type("AWS::ApiGateway::Account") == {}
    assert "RestApiLogsRole" not in stack.of_type("AWS::IAM::Role")
    [stage] = stack.of_type("AWS::ApiGatewayV2::Stage").values()
    props = stage["Properties"]
    assert (props["ApiId"], props["StageName"], props["AutoDeploy"]) == ({"Ref": "HttpApi"}, "prod", True)
    assert props["DefaultRouteSettings"] == {"ThrottlingRateLimit": "100", "ThrottlingBurstLimit": "200"}
    url = render(stack.outputs["ApiUrl"]["Value"], stack)
    assert url == "https://<HttpApi>.execute-api.eu-west-1.amazonaws.com/prod"
    assert render(stack.outputs["ApiExecuteArn"]["Value"], stack) == (
        f"arn:aws:execute-api:eu-west-1:{ACCOUNT}:<HttpApi>/prod"
    )


def test_every_api_type_logs_each_request_and_nothing_of_its_content(scenario: tuple[str, Stack]) -> None:
    name, stack = scenario
    http = SCENARIOS[name].get("ApiType") == "HTTP"
    stages = stack.of_type("AWS::ApiGatewayV2::Stage" if http else "AWS::ApiGateway::Stage")
    assert len(stages) == 1
    props = next(iter(stages.values()))["Properties"]
    settings = props["AccessLogSettings" if http else "AccessLogSetting"]
    assert render(settings["DestinationArn"], stack) == (
        f"arn:aws:logs:eu-west-1:{ACCOUNT}:log-group:<ApiAccessLogGroup>"  # no ":*" suffix
    )
    assert settings["Format"] == {"Fn::FindInMap": ["ApiAccessLog", "Format", "Json"]}
    line = stack.template["Mappings"]["ApiAccessLog"]["Format"]["Json"]
    fields = json.loads(re.sub(r"\$context\.[A-Za-z.]+", "x", line))
    assert {"requestId", "caller", "method", "path", "status"} <= set(fields)
    variables = set(re.findall(r"\$context\.([A-Za-z.]+)", line))
    assert not {v for v in variables if re.search(r"body|header|querystring|authorization", v, re.I)}
    [group] = [g for n, g in stack.of_type("AWS::Logs::LogGroup").items() if n == "ApiAccessLogGroup"]
    assert group["Properties"]["RetentionInDays"] == "30"
    assert group["Properties"]["LogGroupName"]["Fn::Sub"].startswith("/aws/vendedlogs/")
    assert stack.outputs["ApiAccessLogGroupName"]["Value"] == {"Ref": "ApiAccessLogGroup"}


def test_rest_api_access_logs_come_with_the_account_s_logging_role(translate: Any) -> None:
    """REST APIs refuse access log settings until the account has API Gateway's CloudWatch role: the
    stack sets one (kept on delete, since every REST API of the account and region logs through it),
    unless told the account has one already. The APIs wait for it."""
    stack = translate(RedisSecretArn=REDIS_SECRET)
    role = stack.resources["RestApiLogsRole"]
    account = stack.resources["RestApiLogsAccount"]
    for resource in (role, account):
        assert (resource["DeletionPolicy"], resource["UpdateReplacePolicy"]) == ("Retain", "Retain")
    assert role["Properties"]["ManagedPolicyArns"] == [
        {"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs"}
    ]
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "apigateway.amazonaws.com"
    }
    assert account["Properties"]["CloudWatchRoleArn"] == {"Fn::GetAtt": ["RestApiLogsRole", "Arn"]}
    ready = stack.resources["RestApiLogsRoleReady"]
    assert ready["Metadata"]["AccountSetting"] == {"Ref": "RestApiLogsAccount"}
    assert stack.resources["IamApi"]["DependsOn"] == "RestApiLogsRoleReady"
    existing = translate(**SCENARIOS["rest-existing-logs-role"])
    assert "RestApiLogsRole" not in existing.resources
    assert "RestApiLogsAccount" not in existing.resources
    assert existing.resources["RestApiLogsRoleReady"]["Metadata"]["AccountSetting"] == "existing"


# Every route of the contract (CONTRACT.md), as a caller sends it: the client policy must allow each.
CONTRACT_REQUESTS = (
    "POST /jobs", "POST /jobs/batch", "PUT /jobs/orders/job-1", "GET /jobs/orders/job-1",
    "PATCH /jobs/orders/job-1", "DELETE /jobs/orders/job-1", "GET /topics", "GET /topics/orders",
    "POST /topics/orders/jobs", "GET /topics/orders/jobs", "DELETE /topics/orders/jobs", "GET /topics/orders/dead",
    "POST /topics/orders/dead/replay", "DELETE /topics/orders/dead", "GET /topics/orders/forecast",
    "POST /topics/orders/pause", "POST /topics/orders/resume", "PUT /schedules/orders/daily",
    "GET /schedules/orders/daily", "DELETE /schedules/orders/daily", "GET /schedules", "GET /health",
    "GET /openapi.json", "GET /topics/orders/keys", "GET /topics/orders/keys/acme", "PUT /topics/orders/keys/acme",
    "DELETE /topics/orders/keys/acme",
)  # fmt: skip
NOT_ROUTES = ("GET /", "GET /admin", "HEAD /jobs", "OPTIONS /jobs/orders/job-1", "POST /health", "PUT /jobs")


def app_requests() -> list[str]:
    """Every route the API serves now (its OpenAPI document), as a request with sample parameters."""
    document = create_app(Queue(Settings())).get_openapi_schema().model_dump(by_alias=True)
    samples = {"topic": "orders", "id": "job-1"}
    requests = []
    for path, item in document["paths"].items():
        concrete = re.sub(r"\{(\w+)\}", lambda m: samples.get(m.group(1), "x"), path)
        requests += [f"{method.upper()} {concrete}" for method in item if item[method] is not None]
    return requests


def client_policy(stack: Stack) -> list[str]:
    [statement] = [s for _, s in statements(stack, ("ApiClientPolicy",))]
    assert (statement["Effect"], statement["Action"]) == ("Allow", "execute-api:Invoke")
    resources: list[str] = render(statement["Resource"], stack)
    return resources


@pytest.mark.parametrize("api_type", ["REST", "HTTP"])
def test_the_client_policy_allows_every_route_and_nothing_else(translate: Any, api_type: str) -> None:
    """Issue 15: ``prod/*/*`` granted any method on any path. Now: the API's routes by method and
    path; the API's own OpenAPI document and the contract's route list are both covered."""
    stack = translate(RedisSecretArn=REDIS_SECRET, ApiType=api_type)
    api = "HttpApi" if api_type == "HTTP" else "IamApi"
    prefix = f"arn:aws:execute-api:eu-west-1:{ACCOUNT}:<{api}>/prod/"
    resources = client_policy(stack)
    assert all(r.startswith(prefix) for r in resources)
    assert not any(r.startswith(prefix + "*") for r in resources)  # every method named
    served = app_requests()
    assert "POST /jobs" in served
    for request in {*served, *CONTRACT_REQUESTS}:
        method, path = request.split(" ", 1)
        assert iam_allows(resources, prefix + method + path), request
    for request in NOT_ROUTES:
        method, path = request.split(" ", 1)
        assert not iam_allows(resources, prefix + method + path), request


def test_the_documented_topic_policy_keeps_a_caller_to_its_topics(translate: Any) -> None:
    """``infra/policies/topic-caller.json`` (the docs quote it): a caller limited to the topics
    ``orders`` and ``refunds`` by path. It can create through ``POST /topics/{topic}/jobs``, not
    through ``POST /jobs`` (the topic in the body, which IAM cannot see)."""
    policy = json.loads(TOPIC_POLICY.read_text())
    stack = translate(RedisSecretArn=REDIS_SECRET)
    execute_arn = render(stack.outputs["ApiExecuteArn"]["Value"], stack)
    resources = [
        resource.replace("${ApiExecuteArn}", execute_arn)
        for statement in policy["Statement"]
        for resource in statement["Resource"]
    ]
    assert all(statement["Action"] == "execute-api:Invoke" for statement in policy["Statement"])
    assert all(statement["Effect"] == "Allow" for statement in policy["Statement"])
    for topic in ("orders", "refunds"):
        for request in CONTRACT_REQUESTS:
            if f"/{topic}" not in request.replace("orders", topic) or request.startswith("POST /jobs"):
                continue
            method, path = request.replace("orders", topic).split(" ", 1)
            assert iam_allows(resources, f"{execute_arn}/{method}{path}"), request
    refused = (
        "POST /jobs", "POST /jobs/batch", "GET /topics", "GET /schedules", "POST /topics/payments/jobs",
        "GET /jobs/payments/job-1", "DELETE /topics/payments/dead", "GET /topics/orders-eu",
        "GET /topics/orders-eu/dead", "PUT /jobs/ordersX/job-1", "PUT /schedules/payments/daily",
    )  # fmt: skip
    for request in refused:
        method, path = request.split(" ", 1)
        assert not iam_allows(resources, f"{execute_arn}/{method}{path}"), request
    assert iam_allows(resources, f"{execute_arn}/GET/health")


def test_api_keys_come_with_a_throttled_usage_plan(translate: Any) -> None:
    stack = translate(**SCENARIOS["api-key"])
    plans = stack.of_type("AWS::ApiGateway::UsagePlan")
    assert len(plans) == 1
    props = next(iter(plans.values()))["Properties"]
    assert props["ApiStages"][0]["ApiId"] == {"Ref": "KeyApi"}
    assert props["Throttle"] == {"RateLimit": 100, "BurstLimit": 200}
    assert len(stack.of_type("AWS::ApiGateway::ApiKey")) == 1
    assert len(stack.of_type("AWS::ApiGateway::UsagePlanKey")) == 1
    assert translate().of_type("AWS::ApiGateway::UsagePlan") == {}


def test_no_method_is_open(scenario: tuple[str, Stack]) -> None:
    _, stack = scenario
    for resource in stack.template["Resources"].values():
        if resource["Type"] == "AWS::ApiGateway::Method":
            props = resource["Properties"]
            assert props.get("AuthorizationType", "NONE") != "NONE" or props.get("ApiKeyRequired") is True
        if resource["Type"] in API_KINDS.values():
            for path in resource["Properties"]["Body"]["paths"].values():
                for operation in path.values():
                    assert operation.get("security"), "a method without auth"


# -------------------------------------------------------------------------------------------------- IAM


def test_no_wildcard_resources_but_x_ray(scenario: tuple[str, Stack]) -> None:
    _, stack = scenario
    for name, statement in statements(stack):
        assert statement["Effect"] == "Allow"
        assert "NotResource" not in statement
        assert "NotAction" not in statement
        actions = as_list(statement["Action"])
        for resource in as_list(statement["Resource"]):
            assert resource, name
            if isinstance(resource, str) and "*" in resource:
                assert all(action.startswith("xray:") for action in actions), (name, statement)
        assert all("*" not in action for action in actions), (name, statement)


def test_each_function_reads_only_its_secrets(scenario: tuple[str, Stack]) -> None:
    """Each function reads the Redis secret; consume also reads the webhook key's, when one is given,
    and no other function can; nobody reads the cache's disabled default user's password."""
    name, stack = scenario
    secret = {"Ref": "RedisSecret"} if "RedisSecretArn" not in SCENARIOS[name] else REDIS_SECRET
    for function in FUNCTION_IDS:
        role = role_of(stack, function)
        reads = _granting(stack, role, "secretsmanager:")
        webhook = function == "Consume" and "WebhookSecretArn" in SCENARIOS[name]
        assert [r["Resource"] for r in reads] == [secret, WEBHOOK_SECRET] if webhook else [secret]
        assert all(as_list(r["Action"]) == ["secretsmanager:GetSecretValue"] for r in reads)
        logs = _granting(stack, role, "logs:")
        assert [s["Resource"] for s in logs] == [{"Fn::GetAtt": [f"{function}LogGroup", "Arn"]}]


def _granting(stack: Stack, role: str, prefix: str) -> list[dict[str, Any]]:
    """The statements of ``role`` with an action starting with ``prefix``."""
    return [s for _, s in statements(stack, (role,)) if any(a.startswith(prefix) for a in as_list(s["Action"]))]


def test_consume_reaches_exactly_the_targets_given(translate: Any) -> None:
    empty = translate(RedisSecretArn=REDIS_SECRET)
    target_actions = {action for action, _ in TARGET_PARAMETERS.values()}
    granted = {a for _, s in statements(empty, FUNCTION_ROLES) for a in as_list(s["Action"])}
    assert granted & target_actions == set()

    for parameter, (action, arn) in TARGET_PARAMETERS.items():
        stack = translate(RedisSecretArn=REDIS_SECRET, **{parameter: arn})
        grants = [(r, s) for r, s in statements(stack, FUNCTION_ROLES) if action in as_list(s["Action"])]
        assert [(r, as_list(s["Resource"])) for r, s in grants] == [("ConsumeRole", [arn])], parameter
        others = target_actions - {action}
        assert {a for _, s in statements(stack, FUNCTION_ROLES) for a in as_list(s["Action"])} & others == set()

    two = translate(RedisSecretArn=REDIS_SECRET, QueueTargetArns=f"{QUEUE},{QUEUE_2}")
    sends = [s for _, s in statements(two) if "sqs:SendMessage" in as_list(s["Action"])]
    assert [as_list(s["Resource"]) for s in sends] == [[QUEUE, QUEUE_2]]


def test_scheduler_roles_invoke_only_their_function(translate: Any) -> None:
    stack = translate()
    for function in LOOP_IDS:
        role = f"{function}EveryMinuteRole"
        invoke = {"Action": "lambda:InvokeFunction", "Effect": "Allow", "Resource": {"Fn::GetAtt": [function, "Arn"]}}
        assert [s for _, s in statements(stack, (role,))] == [invoke]


# ---------------------------------------------------------------------------------------------- Redis


def test_a_cache_and_its_secret_only_without_a_secret_arn(scenario: tuple[str, Stack]) -> None:
    name, stack = scenario
    creates_cache = "RedisSecretArn" not in SCENARIOS[name]
    caches = stack.of_type("AWS::ElastiCache::ServerlessCache")
    secrets = stack.of_type("AWS::SecretsManager::Secret")
    assert len(caches) == int(creates_cache)
    assert len(secrets) == 2 * int(creates_cache)
    if creates_cache:
        props = caches["Cache"]["Properties"]
        assert props["Engine"] == "valkey"
        assert props["UserGroupId"] == {"Ref": "CacheUserGroup"}
        if "SubnetIds" in SCENARIOS[name]:
            assert props["SubnetIds"] == IN_VPC["SubnetIds"].split(",")
            assert props["SecurityGroupIds"] == IN_VPC["SecurityGroupIds"].split(",")
        assert stack.outputs["RedisSecretArn"]["Value"] == {"Ref": "RedisSecret"}
    else:
        assert stack.outputs["RedisSecretArn"]["Value"] == REDIS_SECRET
        assert stack.of_type("AWS::ElastiCache::User") == {}


def test_the_created_cache_admits_only_delayq_s_user_with_delayq_s_commands(translate: Any) -> None:
    """Issue 15: the created cache had no user group. Now its default user is off (a connection that
    does not authenticate can do nothing) and the functions' user runs only the commands of the ACL the
    security tier proves sufficient (ACL_COMMANDS), on the namespace's keys; its password is generated
    into the secret the functions read, and reaches the user by reference, never as text."""
    stack = translate(**IN_VPC, Namespace="shop")
    group = stack.props("CacheUserGroup")
    assert group["Engine"] == "valkey"
    assert group["UserIds"] == [{"Ref": "CacheDefaultUser"}, {"Ref": "CacheUser"}]
    default, user = stack.props("CacheDefaultUser"), stack.props("CacheUser")
    assert default["UserName"] == "default"
    assert default["AccessString"].split() == ["off", "-@all"]
    assert user["UserName"] == "delayq"
    rules = render(user["AccessString"], stack).split()
    assert rules[:3] == ["on", "~shop:*", "-@all"]
    assert sorted(rule.removeprefix("+") for rule in rules[3:]) == sorted(ACL_COMMANDS)
    assert all(rule.startswith("+") for rule in rules[3:])
    for props, secret, key in ((user, "RedisSecret", ":password"), (default, "CacheDefaultUserSecret", "")):
        assert props["Engine"] == "valkey"
        assert props["AuthenticationMode"] == {
            "Type": "password",
            "Passwords": [{"Fn::Sub": f"{{{{resolve:secretsmanager:${{{secret}}}:SecretString{key}}}}}"}],
        }
        generated = stack.props(secret)["GenerateSecretString"]
        assert "SecretString" not in stack.props(secret)
        assert (generated["PasswordLength"], generated["ExcludePunctuation"]) == (64, True)
    assert json.loads(stack.props("RedisSecret")["GenerateSecretString"]["SecretStringTemplate"]) == {
        "username": "delayq"
    }
    assert stack.props("RedisSecret")["GenerateSecretString"]["GenerateStringKey"] == "password"
    ids = {render(stack.props(name)[key], stack) for name, key in (
        ("CacheUser", "UserId"), ("CacheDefaultUser", "UserId"), ("CacheUserGroup", "UserGroupId")
    )}  # fmt: skip
    # Lower case, as ElastiCache wants ids, whatever the case of the stack's name; unique to the stack.
    assert ids == {"delayq-51af3dc0", "delayq-51af3dc0-default", "delayq-51af3dc0-users"}
    # Kept with the cache when the stack goes: the cache cannot lose its users, nor they their password.
    for name in ("Cache", "CacheUser", "CacheDefaultUser", "CacheUserGroup", "RedisSecret", "CacheDefaultUserSecret"):
        assert stack.resources[name]["DeletionPolicy"] == "RetainExceptOnCreate", name


# ----------------------------------------------------------------------------- alarms, dashboard, logs


def _alarm(stack: Stack, metric: str, dimension: Any) -> dict[str, Any]:
    found = [
        r["Properties"]
        for r in stack.of_type("AWS::CloudWatch::Alarm").values()
        if r["Properties"]["MetricName"] == metric and r["Properties"]["Dimensions"][0]["Value"] == dimension
    ]
    assert len(found) == 1, (metric, dimension)
    return found[0]


def test_alarms(translate: Any) -> None:
    stack = translate()
    service = {"Ref": "AWS::StackName"}
    dead = _alarm(stack, "Dead", service)
    assert (dead["Namespace"], dead["Statistic"], dead["Period"], dead["Threshold"]) == ("delayq", "Sum", 300, 0)
    assert dead["ComparisonOperator"] == "GreaterThanThreshold"
    assert dead["Dimensions"] == [{"Name": "service", "Value": service}]
    late = _alarm(stack, "Lateness", service)
    assert (late["Namespace"], late["ExtendedStatistic"], late["Period"]) == ("delayq", "p99", 60)
    assert (late["EvaluationPeriods"], late["DatapointsToAlarm"], late["Threshold"]) == (3, 3, "5000")
    for function in FUNCTION_IDS:
        errors = _alarm(stack, "Errors", {"Ref": function})
        assert (errors["Namespace"], errors["Threshold"], errors["ComparisonOperator"]) == (
            "AWS/Lambda",
            0,
            "GreaterThanThreshold",
        )
        # The loops log Redis errors and return normally: a Lambda error alarm cannot catch an outage.
        assert "Redis unreachable" not in errors["AlarmDescription"]
    redis = _alarm(stack, "RedisErrors", service)
    assert redis["AlarmName"] == {"Fn::Sub": "${AWS::StackName}-redis-errors"}
    assert (redis["Namespace"], redis["Statistic"], redis["Dimensions"]) == (
        "delayq",
        "Sum",
        [{"Name": "service", "Value": service}],
    )
    # Errors in 2 minutes in a row: a minute of outage pages, a blip within a minute does not.
    assert (redis["Period"], redis["EvaluationPeriods"], redis["DatapointsToAlarm"]) == (60, 2, 2)
    assert (redis["Threshold"], redis["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    assert redis["TreatMissingData"] == "notBreaching"
    for alarm in stack.of_type("AWS::CloudWatch::Alarm").values():
        assert "AlarmActions" not in alarm["Properties"]
    notified = translate(AlarmTopicArn=SNS_TOPIC)
    for alarm in notified.of_type("AWS::CloudWatch::Alarm").values():
        assert alarm["Properties"]["AlarmActions"] == [SNS_TOPIC]
        assert alarm["Properties"]["OKActions"] == [SNS_TOPIC]


def test_dashboard_shows_the_metrics(translate: Any) -> None:
    stack = translate()
    dashboards = stack.of_type("AWS::CloudWatch::Dashboard")
    assert len(dashboards) == 1
    body = json.loads(render(dashboards["Dashboard"]["Properties"]["DashboardBody"], stack))
    text = json.dumps(body)
    for metric in (*METRICS, "Errors", "Duration", "ConcurrentExecutions"):
        assert f'"{metric}"' in text, metric
    for function in FUNCTION_IDS:
        assert f'"<{function}>"' in text, function
    (alarms,) = [widget for widget in body["widgets"] if widget["type"] == "alarm"]
    listed = alarms["properties"]["alarms"]
    assert sorted(listed) == sorted(f"<{name}.Arn>" for name in stack.of_type("AWS::CloudWatch::Alarm"))
    redis_errors = ["delayq", "RedisErrors", "service", "<AWS::StackName>"]
    assert any(row[:4] == redis_errors for widget in body["widgets"] for row in widget["properties"].get("metrics", []))


@pytest.mark.parametrize(
    ("api_type", "rows"),
    [
        ("REST", [["AWS/ApiGateway", "Count", "ApiName", "<AWS::StackName>", "Stage", "prod"], "4XXError", "5XXError"]),
        ("HTTP", [["AWS/ApiGateway", "Count", "ApiId", "<HttpApi>", "Stage", "prod"], "4xx", "5xx"]),
    ],
)
def test_the_dashboard_shows_the_api_s_own_metrics(translate: Any, api_type: str, rows: list[Any]) -> None:
    stack = translate(RedisSecretArn=REDIS_SECRET, ApiType=api_type)
    body = json.loads(render(stack.props("Dashboard")["DashboardBody"], stack))
    [widget] = [w for w in body["widgets"] if w["properties"].get("title") == "API requests and errors"]
    metrics = widget["properties"]["metrics"]
    assert metrics[0] == rows[0]
    assert [row[1] for row in metrics[1:]] == rows[1:]


def test_log_groups_with_retention_named_after_the_functions(translate: Any) -> None:
    stack = translate()
    groups = stack.of_type("AWS::Logs::LogGroup")
    assert len(groups) == 4  # and the API's access logs
    for function in FUNCTION_IDS:
        group = groups[f"{function}LogGroup"]["Properties"]
        name = stack.props(function)["FunctionName"]["Fn::Sub"]
        assert group["LogGroupName"] == {"Fn::Sub": f"/aws/lambda/{name}"}
        assert group["RetentionInDays"] == "30"
        assert stack.props(function)["LoggingConfig"] == {"LogGroup": {"Ref": f"{function}LogGroup"}}


# ---------------------------------------------------------------------------------- outputs, metadata


def test_outputs(scenario: tuple[str, Stack]) -> None:
    _, stack = scenario
    for output in ("ApiUrl", "EnqueueFunctionName", "SweepFunctionName", "ConsumeFunctionName", "RedisSecretArn"):
        assert output in stack.outputs, output
    api, _ = the_api(stack)
    assert (
        render(stack.outputs["ApiUrl"]["Value"], stack) == f"https://<{api}>.execute-api.eu-west-1.amazonaws.com/prod"
    )


def test_parameters_are_documented_and_grouped() -> None:
    template = load_template()
    parameters = template["Parameters"]
    interface = template["Metadata"]["AWS::CloudFormation::Interface"]
    grouped = [name for group in interface["ParameterGroups"] for name in group["Parameters"]]
    assert sorted(grouped) == sorted(parameters)
    assert sorted(interface["ParameterLabels"]) == sorted(parameters)
    for name, spec in parameters.items():
        assert spec.get("Description"), name
    assert parameters["MemorySize"]["Default"] == 256
    assert parameters["ApiAuth"]["AllowedValues"] == ["IAM", "API_KEY"]
    assert parameters["ApiAuth"]["Default"] == "IAM"
    assert (parameters["ApiType"]["AllowedValues"], parameters["ApiType"]["Default"]) == (["REST", "HTTP"], "REST")
    for name in (*TARGET_PARAMETERS, "SubnetIds", "SecurityGroupIds"):
        assert (parameters[name]["Type"], parameters[name]["Default"]) == ("CommaDelimitedList", ""), name
