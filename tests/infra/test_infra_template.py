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

from delayq.loop import FINISH_BEFORE_DEADLINE_S, STOP_BEFORE_DEADLINE_S
from delayq.settings import Settings, TopicConfig

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "infra" / "template.yaml"
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
    assert kinds.count("AWS::Logs::LogGroup") == 3
    assert kinds.count("AWS::CloudWatch::Dashboard") == 1
    assert kinds.count("AWS::CloudWatch::Alarm") >= 5
    assert kinds.count("AWS::ElastiCache::ServerlessCache") == 1
    assert kinds.count("AWS::SecretsManager::Secret") == 1


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
        assert env["DELAYQ_REDIS_MODE"] == ("cluster" if creates_cache else given.get("RedisMode", "standalone"))
        assert env["DELAYQ_TOPICS"] == json.dumps(TOPICS)
        assert env["POWERTOOLS_SERVICE_NAME"] == {"Ref": "AWS::StackName"}
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == "delayq"
        assert env["POWERTOOLS_TRACER_CAPTURE_RESPONSE"] == "false"  # no job bodies in X-Ray traces
        assert env["LOG_LEVEL"] == "INFO"
        assert ("DELAYQ_LOOP_SECONDS" in env) == (function in LOOP_IDS)
        webhook = env.get("DELAYQ_WEBHOOK_SECRET")
        if function == "Consume" and "WebhookSecretArn" in given:
            assert webhook == {"Fn::Sub": "{{resolve:secretsmanager:${WebhookSecretArn}:SecretString}}"}
        else:
            assert webhook is None
        # Every value delayq reads is one its settings accept.
        plain = {key: value if isinstance(value, str) else "x" for key, value in env.items()}
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


def test_one_api_with_auth_on_every_method(scenario: tuple[str, Stack]) -> None:
    name, stack = scenario
    api_key = SCENARIOS[name].get("ApiAuth") == "API_KEY"
    apis = stack.of_type("AWS::ApiGateway::RestApi")
    assert list(apis) == (["KeyApi"] if api_key else ["IamApi"])
    assert stack.of_type("AWS::ApiGateway::Method") == {}  # every route is in the OpenAPI body
    body = next(iter(apis.values()))["Properties"]["Body"]
    schemes = body["components"]["securitySchemes"]
    assert list(body["paths"]) == ["/{proxy+}"]  # /health and /openapi.json included; "/" has no method
    operations = [op for path in body["paths"].values() for op in path.values()]
    assert len(operations) == 1
    for operation in operations:
        assert operation["x-amazon-apigateway-integration"]["type"] == "aws_proxy"
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
    assert f"${{{next(iter(apis))}}}/prod/" in source
    assert ("ApiKeyId" in stack.outputs) == api_key
    assert ("ApiClientPolicyArn" in stack.outputs) == (not api_key)


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
        if resource["Type"] == "AWS::ApiGateway::RestApi":
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


def test_each_function_reads_only_its_redis_secret(scenario: tuple[str, Stack]) -> None:
    name, stack = scenario
    secret = {"Ref": "RedisSecret"} if "RedisSecretArn" not in SCENARIOS[name] else REDIS_SECRET
    for function in FUNCTION_IDS:
        role = role_of(stack, function)
        reads = _granting(stack, role, "secretsmanager:")
        assert len(reads) == 1
        assert as_list(reads[0]["Action"]) == ["secretsmanager:GetSecretValue"]
        assert reads[0]["Resource"] == secret
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
    assert len(caches) == len(secrets) == int(creates_cache)
    if creates_cache:
        props = caches["Cache"]["Properties"]
        assert props["Engine"] == "valkey"
        if "SubnetIds" in SCENARIOS[name]:
            assert props["SubnetIds"] == IN_VPC["SubnetIds"].split(",")
            assert props["SecurityGroupIds"] == IN_VPC["SecurityGroupIds"].split(",")
        url = json.loads(sub_placeholders(secrets["RedisSecret"]["Properties"]["SecretString"]["Fn::Sub"]))["url"]
        assert url == "rediss://XCache_Endpoint_Address:XCache_Endpoint_Port/0"
        assert stack.outputs["RedisSecretArn"]["Value"] == {"Ref": "RedisSecret"}
    else:
        assert stack.outputs["RedisSecretArn"]["Value"] == REDIS_SECRET


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
    body = json.loads(sub_placeholders(dashboards["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"], stack.values))
    text = json.dumps(body)
    for metric in (*METRICS, "Errors", "Duration", "ConcurrentExecutions"):
        assert f'"{metric}"' in text, metric
    for function in FUNCTION_IDS:
        assert f'"X{function}"' in text, function
    (alarms,) = [widget for widget in body["widgets"] if widget["type"] == "alarm"]
    listed = alarms["properties"]["alarms"]
    assert sorted(listed) == sorted(f"X{name}_Arn" for name in stack.of_type("AWS::CloudWatch::Alarm"))
    redis_errors = ["delayq", "RedisErrors", "service", "XAWS__StackName"]
    assert any(row[:4] == redis_errors for widget in body["widgets"] for row in widget["properties"].get("metrics", []))


def test_log_groups_with_retention_named_after_the_functions(translate: Any) -> None:
    stack = translate()
    groups = stack.of_type("AWS::Logs::LogGroup")
    assert len(groups) == 3
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
    api = next(iter(stack.of_type("AWS::ApiGateway::RestApi")))
    assert f"${{{api}}}" in stack.outputs["ApiUrl"]["Value"]["Fn::Sub"]


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
    for name in (*TARGET_PARAMETERS, "SubnetIds", "SecurityGroupIds"):
        assert (parameters[name]["Type"], parameters[name]["Default"]) == ("CommaDelimitedList", ""), name
