#!/usr/bin/env python3
"""The gate's security rules that no generic scanner knows, checked on what a template deploys:
the template with its gate application (sam/gate/template.yaml, an AWS::Serverless::Application
with a local Location) merged in (template_iam.load_template). Run by `gatectl check-template`;
exits non-zero naming every rule broken:

* one role per function: every AWS::Serverless::Function has its own explicit Role (no SAM
  policy templates, no role shared by two functions);
* no wildcard resource where one can be named: Resource "*" only for actions without
  resource-level permissions (cloudwatch:PutMetricData), and then with a Condition;
* the secrets: secretsmanager:GetSecretValue only on one secret parameter per statement; the
  gate's only in the roles of their readers: ServerSecretArns (consumer, reconciler),
  DatabaseUrlSecretArn (Store=postgres: consumer, reconciler, metrics); kms:Decrypt alone in its
  statement, on that secret's key parameter, through Secrets Manager only (kms:ViaService) and
  for one secret its holder may read (kms:EncryptionContext:SecretARN);
* every Allow statement names its actions and resources: no NotAction or NotResource, no
  wildcard (`*` or `?`) in an action name, compared without case as IAM does;
* every queue encrypted; every dead-letter queue keeps messages longer than its source; every
  maxReceiveCount at least 5 (MIN_RECEIVE_COUNT), a literal or a bounded parameter;
* every table encrypted, with point-in-time recovery and deletion protection from the
  TableDeletionProtection parameter, the idempotency table's window the
  IdempotencyTableRecoveryDays parameter (at most 35 days), every table under UseDynamoDb;
* every SQS event source bounded by ScalingConfig.MaximumConcurrency, reporting batch item
  failures;
* queue policies, one per queue, each denying requests without TLS, none allowing Principal
  "*": the manual queue (the functions' MANUAL_QUEUE_URL) sent to and read by only the roles of
  the functions that send to it and OperatorRoleArn, no role reading it; the event queue (the
  consumer's SQS event source) sent to by ProducerArns and OperatorRoleArn only, every role of
  the template that sends to it named in the application's ProducerArns, read by the consumer's
  role and the operator only; every dead-letter queue read by the operator only;
  ProducerArns and OperatorRoleArn without a default, and so the parameters that feed them;
* the Store parameter: every function that uses the store has STORE (the template's Store,
  which is also the application's), its table variables under UseDynamoDb,
  DATABASE_URL_SECRET_ARN, and its VpcConfig under InVpc;
* the functions the application schedules and watches (ConsumerFunctionName,
  ReconcilerFunctionName, MetricsFunctionName) are the template's functions of the same
  FunctionName, each with the application's role of that name (ConsumerRoleArn, ...);
* the operators' managed policy (gatectl): one AWS::IAM::ManagedPolicy, every resource named,
  no wildcard action; it reads everything gatectl shows (the stack, both tables and the
  idempotency table's indexes, every queue's attributes, the manual and dead-letter queues'
  messages) and writes exactly what its subcommands write (OPERATOR_WRITES), nothing else.

Usage: check-template-policy.py TEMPLATE   (PyYAML)
"""

import sys

import yaml

from template_iam import (  # template_iam.py, beside this script (sys.path[0])
    Tag, actions_of, as_list, check_allow_shape, check_kms_decrypt, load_template,
    policy_statements, ref, resource_name, statements,
)

# Actions that have no resource-level permissions, so "*" is the only possible resource.
NO_RESOURCE_LEVEL = {"cloudwatch:PutMetricData"}
# The fewest receives before a message is dead-lettered: throttling and deadline retries (a record
# not started near the invocation's deadline, a throttled store) fail a good message a few times
# in a row; below 5 they push it to the dead-letter queue. The AWS Lambda developer guide ("Using
# Lambda with Amazon SQS") advises a maxReceiveCount of at least 5 on a queue that triggers Lambda.
MIN_RECEIVE_COUNT = 5
# The gate application's secret parameters and the roles (of its functions) that may read them;
# an integration's own secret parameter may be read by any one role.
SECRET_READERS = {
    # The server's token or key: the functions that call the server.
    "ServerSecretArns": {"ConsumerRole", "ReconcilerRole"},
    # Store=postgres: the connection string, read by the functions that use the store.
    "DatabaseUrlSecretArn": {"ConsumerRole", "ReconcilerRole", "MetricsRole"},
}
# The application's function-name parameters and the role output each such function runs with.
FUNCTION_ROLES = {
    "ConsumerFunctionName": "ConsumerRole",
    "ReconcilerFunctionName": "ReconcilerRole",
    "MetricsFunctionName": "MetricsRole",
}


# Queue policies.
OPERATOR = "OperatorRoleArn"
PRODUCERS = "ProducerArns"
RECOVERY_DAYS = "IdempotencyTableRecoveryDays"
READS = {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:PurgeQueue"}


def names(value):
    """Every logical id or parameter a (possibly nested) expression refers to, plus any literal
    ARN it holds: `!Split [",", !Join [",", [!Join [",", !Ref A], !Ref B]]]` is {A, B}."""
    out = set()
    if isinstance(value, Tag):
        target = ref(value)
        if target is not None:
            out.add(target)
        else:
            out |= names(value.value)
    elif isinstance(value, list):
        for v in value:
            out |= names(v)
    elif isinstance(value, dict):
        target = ref(value)
        if target is not None:
            out.add(target)
        else:
            for v in value.values():
                out |= names(v)
    elif isinstance(value, str) and value.startswith("arn:"):
        out.add(value)
    return out


def principal_aws(st):
    """A statement's `Principal.AWS` (or the principal itself when it is a plain "*")."""
    principal = st.get("Principal")
    return principal.get("AWS") if isinstance(principal, dict) else principal


def is_everyone(principal):
    return principal == "*" or (isinstance(principal, dict) and principal.get("AWS") == "*")


def except_principals(st):
    """The principals a Deny statement exempts through `ArnNotEquals aws:PrincipalArn`, or None
    when it has no such condition."""
    cond = (st.get("Condition") or {}).get("ArnNotEquals") or {}
    if "aws:PrincipalArn" not in cond:
        return None
    return names(cond["aws:PrincipalArn"])


def check_queue_access(problem, name, statements, action, allowed):
    """`action` (one or a set) is allowed to principals within `allowed` only, and denied to
    every principal outside `allowed` by a Deny on Principal "*" that exempts no one else."""
    wanted = action if isinstance(action, set) else {action}
    for st in statements:
        actions = set(as_list(st.get("Action")))
        if st.get("Effect") == "Allow" and actions & wanted:
            aws = principal_aws(st)
            extra = (names(aws) | ({"*"} if aws == "*" else set())) - allowed
            if extra:
                problem(f"{name}/{st.get('Sid', '?')}: {sorted(actions & wanted)} allowed to {sorted(extra)}")
    denied = set()
    for st in statements:
        if st.get("Effect") != "Deny" or not is_everyone(st.get("Principal")):
            continue
        if not set(as_list(st.get("Action"))) & wanted:
            continue
        exempt = except_principals(st)
        if exempt is None:
            continue
        if exempt - allowed:
            problem(f"{name}/{st.get('Sid', '?')}: the Deny exempts {sorted(exempt - allowed)}")
            continue
        denied |= set(as_list(st.get("Action"))) & wanted
    if denied != wanted:
        problem(f"{name}: {sorted(wanted - denied)} not denied to every principal but {sorted(allowed)}")


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


# The operators' managed policy (issue 17, gatectl). Reads: anything in OPERATOR_READS. Writes:
# exactly these (action, resource) pairs, each needed by a subcommand: finish, cancel and
# reconcile go through the gate's own writes (UpdateItem: take-over, release, finish, routed,
# slot ids, the audit history; PutItem: the natural-key guard and the booking, a routing
# record of an unbooked slot; SendMessage: a routing to a person); redrive sends dead letters
# back and deletes them.
OPERATOR_READS = {
    "cloudformation:DescribeStacks", "dynamodb:GetItem", "dynamodb:Query", "dynamodb:Scan",
    "dynamodb:DescribeTable", "sqs:ReceiveMessage", "sqs:ChangeMessageVisibility",
    "sqs:GetQueueAttributes", "secretsmanager:GetSecretValue", "kms:Decrypt",
}
OPERATOR_WRITES = {
    ("dynamodb:UpdateItem", "IdempotencyTable"),
    ("dynamodb:PutItem", "IdempotencyTable"),
    ("dynamodb:PutItem", "BusinessTable"),
    ("sqs:SendMessage", "ManualQueue"),
    ("sqs:SendMessage", "EventQueue"),
    ("sqs:DeleteMessage", "EventDeadLetterQueue"),
}
# The secrets gatectl reads: the server's (to ask it) and, with Store=postgres, the functions'
# connection string.
OPERATOR_SECRETS = {"ServerSecretArns", "DatabaseUrlSecretArn"}
# What "reads everything" means: each of these (action, resource) pairs is granted. StackId is
# the integration's stack (gatectl --stack reads its outputs).
OPERATOR_MUST_READ = {
    ("cloudformation:DescribeStacks", "StackId"),
    ("dynamodb:GetItem", "IdempotencyTable"),
    ("dynamodb:Scan", "IdempotencyTable"),
    ("dynamodb:Query", "IdempotencyTable/index/*"),
    ("dynamodb:GetItem", "BusinessTable"),
    ("sqs:ReceiveMessage", "ManualQueue"),
    ("sqs:ChangeMessageVisibility", "ManualQueue"),
    ("sqs:ReceiveMessage", "EventDeadLetterQueue"),
    ("sqs:ChangeMessageVisibility", "EventDeadLetterQueue"),
    ("sqs:GetQueueAttributes", "EventQueue"),
    ("sqs:GetQueueAttributes", "ManualQueue"),
    ("sqs:GetQueueAttributes", "EventDeadLetterQueue"),
} | {("secretsmanager:GetSecretValue", secret) for secret in OPERATOR_SECRETS}


def check_operator_policy(problem, resources):
    policies = {k: v for k, v in resources.items() if v["Type"] == "AWS::IAM::ManagedPolicy"}
    if len(policies) != 1:
        problem(f"the operators' managed policy: {len(policies)} AWS::IAM::ManagedPolicy, want 1")
        return
    (name, pol), = policies.items()
    granted = set()
    for st in policy_statements(pol.get("Properties", {}).get("PolicyDocument")):
        sid = st.get("Sid", "?")
        if st.get("Effect") != "Allow":
            continue
        actions = set(as_list(st.get("Action")))
        names_ = [resource_name(r) for r in as_list(st.get("Resource"))]
        check_allow_shape(problem, name, st)
        if "kms:decrypt" in actions_of(st):
            check_kms_decrypt(problem, name, st, OPERATOR_SECRETS)
        if any(n == "*" or (isinstance(n, str) and n.endswith(":*")) for n in names_):
            problem(f"{name}/{sid}: Resource '*' for {sorted(actions)}")
        for a in actions:
            for n in names_:
                granted.add((a, n))
                if a in OPERATOR_READS:
                    if a == "secretsmanager:GetSecretValue" and n not in OPERATOR_SECRETS:
                        problem(f"{name}/{sid}: GetSecretValue on {n}")
                elif (a, n) not in OPERATOR_WRITES:
                    problem(f"{name}/{sid}: writes {a} on {n}, which no gatectl subcommand writes")
    for a, n in sorted(OPERATOR_WRITES - granted):
        problem(f"{name}: {a} on {n} missing (a gatectl subcommand writes it)")
    for a, n in sorted(OPERATOR_MUST_READ - granted):
        problem(f"{name}: cannot read: {a} on {n}")


def main(path):
    problems = []

    def problem(text):
        problems.append(text)

    try:
        template = load_template(path)
    except (OSError, ValueError, yaml.YAMLError) as e:
        problem(f"{path}: {e}")
        template = {"Resources": {}, "Applications": {}}
    resources = template["Resources"]
    apps = template["Applications"]
    if not apps:
        problem("no gate application (AWS::Serverless::Application with a local Location)")

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

    # No wildcard resource where one can be named; each secret read by its readers only.
    params = template.get("Parameters", {})
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
            check_allow_shape(problem, role_name, st)
            if "kms:decrypt" in actions_of(st):
                readable = {secret for secret, allowed in SECRET_READERS.items()
                            if role_name in allowed}
                readable |= {s for s in params if s not in SECRET_READERS}
                check_kms_decrypt(problem, role_name, st, readable)
            if "secretsmanager:getsecretvalue" in actions_of(st):
                secrets = [ref(r) for r in resources_]
                if len(secrets) != 1 or secrets[0] not in params:
                    problem(f"{role_name}/{sid}: GetSecretValue on {resources_}, not one secret parameter")
                elif secrets[0] in SECRET_READERS and role_name not in SECRET_READERS[secrets[0]]:
                    problem(f"{role_name}/{sid}: {secrets[0]} readable by {role_name}")
    for secret, readers in SECRET_READERS.items():
        for role_name in sorted(readers):
            if role_name in roles and not any(
                "secretsmanager:GetSecretValue" in as_list(st.get("Action"))
                and [ref(r) for r in as_list(st.get("Resource"))] == [secret]
                for st in statements(roles[role_name])
            ):
                problem(f"{role_name}: cannot read {secret}")

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

    # Queue policies: one per queue, TLS only, no Allow for everyone, who sends, who reads.
    policy_of = {}
    for pname, pol in resources.items():
        if pol["Type"] != "AWS::SQS::QueuePolicy":
            continue
        props = pol.get("Properties", {})
        for q in as_list(props.get("Queues")):
            qname = ref(q)
            if qname in policy_of:
                problem(f"{qname}: two queue policies ({policy_of[qname][0]}, {pname}) overwrite each other")
            policy_of[qname] = (pname, as_list(props.get("PolicyDocument", {}).get("Statement")))
    for qname in queues:
        if qname not in policy_of:
            problem(f"{qname}: no queue policy")
            continue
        pname, sts = policy_of[qname]
        label = f"{pname} ({qname})"
        if not any(
            st.get("Effect") == "Deny" and is_everyone(st.get("Principal"))
            and "sqs:*" in as_list(st.get("Action"))
            and str((st.get("Condition") or {}).get("Bool", {}).get("aws:SecureTransport")).lower() == "false"
            for st in sts
        ):
            problem(f"{label}: requests without TLS are not denied")
        for st in sts:
            if st.get("Effect") == "Allow" and is_everyone(st.get("Principal")):
                problem(f"{label}/{st.get('Sid', '?')}: Allow for Principal '*'")

    for p_ in (OPERATOR, PRODUCERS):
        declared = [params] + [app["Declared"] for app in apps.values()]
        if p_ not in params:
            problem(f"parameter {p_} missing")
        elif any("Default" in (d.get(p_) or {}) for d in declared):
            problem(f"parameter {p_} has a default: a deploy must name it")
    # The parameters that feed them: a deploy must name those too.
    for app_name, app in apps.items():
        for p_ in (OPERATOR, PRODUCERS):
            for fed in names(app["Parameters"].get(p_)):
                if "Default" in (template.get("OwnParameters", {}).get(fed) or {}):
                    problem(f"parameter {fed} (the application's {p_}) has a default: a deploy must name it")

    def env_ref(fn, var):
        env = (functions.get(fn, {}).get("Properties", {}).get("Environment") or {}).get("Variables") or {}
        return first_ref(env.get(var))

    def first_ref(value):
        # `!If [Condition, !Ref X, !Ref AWS::NoValue]` (a store-dependent variable, possibly of
        # an application's output that is itself an `!If`): X.
        if isinstance(value, Tag) and value.name == "!If" and isinstance(value.value, list):
            branches = [first_ref(v) for v in value.value[1:]]
            return next((b for b in branches if b not in (None, "AWS::NoValue")), None)
        return ref(value)

    manual_queue = None
    senders = set()
    for fname in functions:
        q = env_ref(fname, "MANUAL_QUEUE_URL")
        if q is not None:
            manual_queue = manual_queue or q
            if q != manual_queue:
                problem(f"{fname}: MANUAL_QUEUE_URL is {q}, not {manual_queue}")
            senders.add(role_of[fname])
    if manual_queue is None:
        problem("no function has MANUAL_QUEUE_URL: the manual-booking queue is unknown")
    elif manual_queue in policy_of:
        pname, sts = policy_of[manual_queue]
        label = f"{pname} ({manual_queue})"
        check_queue_access(problem, label, sts, "sqs:SendMessage", senders | {OPERATOR})
        check_queue_access(problem, label, sts, READS, senders | {OPERATOR})
        for role_name, role in roles.items():
            for st in statements(role):
                if (st.get("Effect") == "Allow" and set(as_list(st.get("Action"))) & READS
                        and manual_queue in names(st.get("Resource"))):
                    problem(f"{role_name}/{st.get('Sid', '?')}: reads the manual-booking queue")

    notification_queues = set()
    for fname, fn in functions.items():
        for ev in (fn.get("Properties", {}).get("Events") or {}).values():
            if ev.get("Type") == "SQS":
                notification_queues.add((ref(ev.get("Properties", {}).get("Queue")), role_of[fname]))
    if not notification_queues:
        problem("no SQS event source: the notification queue is unknown")
    for qname, reader in notification_queues:
        if qname not in policy_of:
            continue
        pname, sts = policy_of[qname]
        label = f"{pname} ({qname})"
        check_queue_access(problem, label, sts, "sqs:SendMessage", {PRODUCERS, OPERATOR})
        # A role of the template that sends here is one of the producers the application names.
        producers = set()
        for app in apps.values():
            producers |= names(app["Parameters"].get(PRODUCERS))
        for role_name, role in roles.items():
            for st in statements(role):
                if (st.get("Effect") == "Allow" and "sqs:SendMessage" in as_list(st.get("Action"))
                        and qname in names(st.get("Resource")) and role_name not in producers):
                    problem(f"{role_name}/{st.get('Sid', '?')}: sends to {qname} but is not in "
                            f"the application's {PRODUCERS} (its sends are denied)")
        senders_named = set()
        for st in sts:
            if st.get("Effect") == "Allow" and "sqs:SendMessage" in as_list(st.get("Action")):
                senders_named |= names(principal_aws(st))
        if PRODUCERS not in senders_named:
            problem(f"{label}: the producers ({PRODUCERS}) may not send")
        check_queue_access(problem, label, sts, READS, {reader, OPERATOR})
        dlq = ref(((queues.get(qname, {}).get("Properties") or {}).get("RedrivePolicy") or {})
                  .get("deadLetterTargetArn"))
        if dlq in policy_of:
            pname, sts = policy_of[dlq]
            check_queue_access(problem, f"{pname} ({dlq})", sts, READS, {OPERATOR})
        elif dlq is not None:
            problem(f"{dlq}: no queue policy")

    # The idempotency table's point-in-time recovery window is a parameter (PINs in backups).
    table = env_ref(next(iter(functions), ""), "IDEMPOTENCY_TABLE")
    if table not in resources:
        problem("IDEMPOTENCY_TABLE names no table of the template")
    else:
        pitr = resources[table].get("Properties", {}).get("PointInTimeRecoverySpecification", {})
        days = pitr.get("RecoveryPeriodInDays")
        if ref(days) != RECOVERY_DAYS or RECOVERY_DAYS not in params:
            problem(f"{table}: RecoveryPeriodInDays is not the {RECOVERY_DAYS} parameter")
        elif number(params[RECOVERY_DAYS].get("MaxValue")) not in range(1, 36):
            problem(f"{RECOVERY_DAYS}: MaxValue must be 1 to 35 (DynamoDB's limit)")

    # The Store parameter (dynamodb | postgres): the tables exist only for DynamoDB; every
    # function that uses the store is told which (STORE), takes the tables only for DynamoDB and
    # runs in the VPC only for PostgreSQL.
    for name, t in resources.items():
        if t["Type"] == "AWS::DynamoDB::Table" and t.get("Condition") != "UseDynamoDb":
            problem(f"{name}: a table without Condition UseDynamoDb (created with Store=postgres)")
    for fname, fn in functions.items():
        props = fn.get("Properties", {})
        env = (props.get("Environment") or {}).get("Variables") or {}
        if "IDEMPOTENCY_TABLE" not in env:
            continue
        if ref(env.get("STORE")) != "Store":
            problem(f"{fname}: uses the store but STORE is not the Store parameter")
        for var in ("IDEMPOTENCY_TABLE", "BOOKINGS_TABLE"):
            value = env.get(var)
            if var in env and not (isinstance(value, Tag) and value.name == "!If"
                                   and value.value[0] == "UseDynamoDb"):
                problem(f"{fname}: {var} is not under Condition UseDynamoDb")
        if "DATABASE_URL_SECRET_ARN" not in env:
            problem(f"{fname}: uses the store but has no DATABASE_URL_SECRET_ARN for Store=postgres")
        vpc = props.get("VpcConfig")
        if not (isinstance(vpc, Tag) and vpc.name == "!If" and vpc.value[0] == "InVpc"):
            problem(f"{fname}: VpcConfig is not under Condition InVpc (the VPC only for PostgreSQL)")

    # The application and the template agree: one store, and the functions it schedules and
    # watches by name are the template's, each with the application's role for it.
    by_name = {}
    for fname, fn in functions.items():
        fn_name = fn.get("Properties", {}).get("FunctionName")
        if fn_name is not None:
            by_name[repr(fn_name)] = fname
    for app_name, app in apps.items():
        given = app["Parameters"]
        if ref(given.get("Store")) != "Store":
            problem(f"{app_name}: its Store is not the template's Store parameter")
        if ref(given.get("StackId")) != "AWS::StackId":
            problem(f"{app_name}: its StackId is not !Ref AWS::StackId (gatectl --stack)")
        for param, role in FUNCTION_ROLES.items():
            if param not in app["Declared"]:
                continue
            fname = by_name.get(repr(given.get(param)))
            if fname is None:
                problem(f"{app_name}: {param} {given.get(param)!r} is no function's FunctionName")
            elif role_of.get(fname) != role:
                problem(f"{fname}: named by {param} but runs with {role_of.get(fname)}, not {role}")

    check_operator_policy(problem, resources)

    for p in problems:
        print(f"check-template-policy: {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"check-template-policy: {len(functions)} functions, {len(roles)} roles, "
          f"{len(queues)} queues, {len(policy_of)} queue policies: every rule holds")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.rsplit("Usage: ", 1)[1])
    sys.exit(main(sys.argv[1]))
