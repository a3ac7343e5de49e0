#!/usr/bin/env python3
"""The template's security rules that no generic scanner knows (issue 7), checked on template.yaml.

Run by scripts/lint-template.sh after checkov; exits non-zero naming every rule broken:

* one role per function: every AWS::Serverless::Function has its own explicit Role (no SAM
  policy templates, no role shared by two functions);
* no wildcard resource where one can be named: an Allow statement with Resource "*" only for
  actions without resource-level permissions (cloudwatch:PutMetricData), and then with a
  Condition;
* the terminal token: secretsmanager:GetSecretValue only on !Ref TerminalApiTokenSecretArn, and
  only in the roles of the functions that call the terminal (consumer, reconciler);
* every queue encrypted (SSE-SQS or a KMS key); every dead-letter queue keeps messages longer
  than its source queue; every redrive policy's maxReceiveCount at least 5 (MIN_RECEIVE_COUNT), a
  literal or a parameter none of whose allowed values is lower (MinValue, or AllowedValues);
* every table encrypted, with point-in-time recovery and deletion protection from the
  TableDeletionProtection parameter;
* every SQS event source bounded by ScalingConfig.MaximumConcurrency, and reports batch item
  failures.

Usage: scripts/check-template-policy.py [template]   (PyYAML: the project venv has it)
"""

import sys
from pathlib import Path

import yaml

# Actions that have no resource-level permissions, so "*" is the only possible resource.
NO_RESOURCE_LEVEL = {"cloudwatch:PutMetricData"}
# The fewest receives before a message is dead-lettered: throttling and deadline retries (a record
# not started near the invocation's deadline, a throttled store) fail a good message a few times
# in a row; below 5 they push it to the dead-letter queue. The AWS Lambda developer guide ("Using
# Lambda with Amazon SQS") advises a maxReceiveCount of at least 5 on a queue that triggers Lambda.
MIN_RECEIVE_COUNT = 5
# The functions that call the terminal and so may read its token.
TOKEN_READERS = {"ConsumerFunction", "ReconcilerFunction"}


class Tag:
    """A CloudFormation intrinsic (!Ref, !GetAtt, !Sub, !If, ...): its name and value."""

    def __init__(self, name, value):
        self.name = name
        self.value = value

    def __eq__(self, other):
        return isinstance(other, Tag) and (self.name, self.value) == (other.name, other.value)

    def __repr__(self):
        return f"{self.name} {self.value!r}"


class Loader(yaml.SafeLoader):
    pass


def _tag(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return Tag("!" + suffix, value)


Loader.add_multi_constructor("!", _tag)


def as_list(value):
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def ref(value):
    """The logical id a !Ref / !GetAtt / Fn::GetAtt points at, else None."""
    if isinstance(value, Tag) and value.name == "!Ref":
        return value.value
    if isinstance(value, Tag) and value.name == "!GetAtt":
        return (value.value if isinstance(value.value, str) else value.value[0]).split(".")[0]
    if isinstance(value, dict) and "Ref" in value:
        return value["Ref"]
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        target = value["Fn::GetAtt"]
        return (target if isinstance(target, str) else target[0]).split(".")[0]
    return None


def statements(role):
    """Every statement of a role's inline policies; !If branches both count."""
    for policy in role.get("Properties", {}).get("Policies", []) or []:
        for st in as_list(policy.get("PolicyDocument", {}).get("Statement")):
            if isinstance(st, Tag) and st.name == "!If":
                for branch in st.value[1:]:
                    if isinstance(branch, dict):
                        yield branch
            elif isinstance(st, dict):
                yield st


def number(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def lowest_value(value, parameters):
    """The lowest number `value` can take: a literal, or a !Ref to a Number parameter bounded by
    MinValue or AllowedValues (the lower bound when both are given); None when unbounded or
    not a number."""
    literal = number(value)
    if literal is not None:
        return literal
    param = parameters.get(ref(value) or "")
    if not isinstance(param, dict):
        return None
    bounds = []
    if number(param.get("MinValue")) is not None:
        bounds.append(number(param["MinValue"]))
    allowed = [number(v) for v in as_list(param.get("AllowedValues"))]
    if allowed and None not in allowed:
        bounds.append(min(allowed))
    return max(bounds) if bounds else None


def main(path):
    template = yaml.load(Path(path).read_text(), Loader=Loader)
    resources = template["Resources"]
    problems = []

    def problem(text):
        problems.append(text)

    functions = {k: v for k, v in resources.items() if v["Type"] == "AWS::Serverless::Function"}
    roles = {k: v for k, v in resources.items() if v["Type"] == "AWS::IAM::Role"}

    # One role per function.
    role_of = {}
    for name, fn in functions.items():
        props = fn.get("Properties", {})
        role = ref(props.get("Role"))
        if role is None or role not in roles:
            problem(f"{name}: no explicit Role of this template")
        if "Policies" in props:
            problem(f"{name}: SAM Policies (a generated role) instead of its own Role")
        if role in role_of.values():
            problem(f"{name}: shares role {role}")
        role_of[name] = role

    # No wildcard resource where one can be named; the token's secret read by its readers only.
    for role_name, role in roles.items():
        for st in statements(role):
            if st.get("Effect") != "Allow":
                continue
            actions = set(as_list(st.get("Action")))
            resources_ = as_list(st.get("Resource"))
            sid = st.get("Sid", "?")
            if any(r == "*" or (isinstance(r, str) and r.endswith(":*")) for r in resources_):
                if not actions <= NO_RESOURCE_LEVEL:
                    problem(f"{role_name}/{sid}: Resource '*' for {sorted(actions)}")
                elif "Condition" not in st:
                    problem(f"{role_name}/{sid}: Resource '*' without a Condition")
            if any(a.endswith("*") for a in actions):
                problem(f"{role_name}/{sid}: wildcard action {sorted(actions)}")
            if "secretsmanager:GetSecretValue" in actions:
                readers = [f for f, r in role_of.items() if r == role_name]
                if not set(readers) <= TOKEN_READERS:
                    problem(f"{role_name}/{sid}: the token's secret readable by {readers}")
                if [ref(r) for r in resources_] != ["TerminalApiTokenSecretArn"]:
                    problem(f"{role_name}/{sid}: GetSecretValue on {resources_}")
    for fn in TOKEN_READERS & functions.keys():
        if not any(
            "secretsmanager:GetSecretValue" in as_list(st.get("Action"))
            for st in statements(roles.get(role_of.get(fn), {}))
        ):
            problem(f"{fn}: its role cannot read the token's secret")

    # Queues: encrypted; a dead-letter queue outlives its source.
    queues = {k: v for k, v in resources.items() if v["Type"] == "AWS::SQS::Queue"}
    for name, q in queues.items():
        props = q.get("Properties", {})
        if props.get("SqsManagedSseEnabled") is not True and "KmsMasterKeyId" not in props:
            problem(f"{name}: not encrypted")
        redrive = props.get("RedrivePolicy")
        if redrive:
            dlq = ref(redrive.get("deadLetterTargetArn"))
            source = number(props.get("MessageRetentionPeriod", 345600))
            target = number(queues.get(dlq, {}).get("Properties", {}).get("MessageRetentionPeriod", 345600))
            if source is None or target is None or target <= source:
                problem(f"{name}: dead-letter queue {dlq} keeps {target} s, not more than {source} s")
            lowest = lowest_value(redrive.get("maxReceiveCount"), template.get("Parameters", {}))
            if lowest is None or lowest < MIN_RECEIVE_COUNT:
                problem(f"{name}: maxReceiveCount can be {lowest if lowest is not None else 'anything'}, "
                        f"below {MIN_RECEIVE_COUNT}")

    # Tables: encrypted, PITR, deletion protection from the parameter.
    for name, t in resources.items():
        if t["Type"] != "AWS::DynamoDB::Table":
            continue
        props = t.get("Properties", {})
        if props.get("SSESpecification", {}).get("SSEEnabled") is not True:
            problem(f"{name}: SSE not enabled")
        pitr = props.get("PointInTimeRecoverySpecification", {})
        if pitr.get("PointInTimeRecoveryEnabled") is not True:
            problem(f"{name}: point-in-time recovery off")
        protection = props.get("DeletionProtectionEnabled")
        if not (isinstance(protection, Tag) and protection.name == "!If"
                and protection.value[0] == "DeletionProtectionOn"):
            problem(f"{name}: DeletionProtectionEnabled is not the TableDeletionProtection parameter")

    # SQS event sources: bounded, partial batch responses.
    for name, fn in functions.items():
        for ev_name, ev in (fn.get("Properties", {}).get("Events") or {}).items():
            if ev.get("Type") != "SQS":
                continue
            props = ev.get("Properties", {})
            if "MaximumConcurrency" not in (props.get("ScalingConfig") or {}):
                problem(f"{name}/{ev_name}: no ScalingConfig.MaximumConcurrency")
            if "ReportBatchItemFailures" not in as_list(props.get("FunctionResponseTypes")):
                problem(f"{name}/{ev_name}: no ReportBatchItemFailures")

    for p in problems:
        print(f"check-template-policy: {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"check-template-policy: {len(functions)} functions, {len(roles)} roles, "
          f"{len(queues)} queues: every rule holds")
    return 0


if __name__ == "__main__":
    root = Path(__file__).resolve().parent.parent
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else root / "template.yaml"))
