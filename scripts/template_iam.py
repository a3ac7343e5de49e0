"""Reading a CloudFormation template's IAM statements, and the rules one statement must keep
on its own (its shape, a KMS key's grant): the part of scripts/check-template-policy.py that
knows IAM's grammar rather than this stack's resources."""

import yaml


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
        yield from policy_statements(policy.get("PolicyDocument"))


def resource_name(value):
    """A policy resource as `Logical` or `Logical/suffix` (`!Sub ${T.Arn}/index/*` is
    `T/index/*`), a literal as itself."""
    target = ref(value)
    if target is not None:
        return target
    if isinstance(value, Tag) and value.name == "!Sub" and isinstance(value.value, str):
        text = value.value
        if text.startswith("${") and "}" in text:
            inner, rest = text[2:].split("}", 1)
            return inner.split(".")[0] + rest
    return value if isinstance(value, str) else repr(value)


def policy_statements(document):
    """Every statement of one policy document; !If branches both count."""
    for st in as_list((document or {}).get("Statement")):
        if isinstance(st, Tag) and st.name == "!If":
            for branch in st.value[1:]:
                if isinstance(branch, dict):
                    yield branch
        elif isinstance(st, dict):
            yield st


# Each secret parameter and the parameter of the customer managed key it may be encrypted with.
SECRET_KEYS = {
    "TerminalApiTokenSecretArn": "TerminalApiTokenSecretKmsKeyArn",
    "TerminalTokenSecretArns": "TerminalApiTokenSecretKmsKeyArn",
    "WebhookSecretArn": "WebhookSecretKmsKeyArn",
    "DatabaseUrlSecretArn": "DatabaseUrlSecretKmsKeyArn",
}


def actions_of(st):
    """A statement's actions, lower-cased (IAM compares action names without case)."""
    return {a.lower() if isinstance(a, str) else repr(a) for a in as_list(st.get("Action"))}


def is_wildcard(action):
    """Whether an action name matches more than itself (IAM's `*` and `?`)."""
    return "*" in action or "?" in action


def check_allow_shape(problem, where, st):
    """An Allow statement names its actions and resources: no `NotAction`, no `NotResource`
    (each grants everything but what it lists), no wildcard in an action."""
    sid = st.get("Sid", "?")
    for field in ("NotAction", "NotResource"):
        if field in st:
            problem(f"{where}/{sid}: {field} in an Allow statement")
    if any(is_wildcard(a) for a in actions_of(st)):
        problem(f"{where}/{sid}: wildcard action {sorted(actions_of(st))}")


def check_kms_decrypt(problem, where, st, readable):
    """A `kms:Decrypt` grant decrypts one secret the holder may read, through Secrets Manager
    only: it grants nothing else, its key is that secret's key parameter (`SECRET_KEYS`), every
    `kms:ViaService` value is Secrets Manager's endpoint and `kms:EncryptionContext:SecretARN`
    names a secret parameter in `readable` (the AWS Secrets Manager user guide, "Secret
    encryption and decryption": the secret's ARN is its encryption context)."""
    sid = st.get("Sid", "?")
    if actions_of(st) != {"kms:decrypt"}:
        problem(f"{where}/{sid}: kms:Decrypt granted with {sorted(actions_of(st))}")
    equals = (st.get("Condition") or {}).get("StringEquals") or {}
    via = equals.get("kms:ViaService")
    if isinstance(via, Tag) and via.name == "!Sub":
        values = [via.value[0] if isinstance(via.value, list) and via.value else via.value]
    else:
        values = as_list(via)
    if not values or not all(isinstance(v, str) and v.startswith("secretsmanager.")
                             for v in values):
        problem(f"{where}/{sid}: kms:Decrypt not limited to Secrets Manager (kms:ViaService)")
    secret = ref(equals.get("kms:EncryptionContext:SecretARN"))
    if secret is None:
        problem(f"{where}/{sid}: kms:Decrypt not limited to one secret "
                f"(kms:EncryptionContext:SecretARN)")
    elif secret not in readable:
        problem(f"{where}/{sid}: kms:Decrypt for {secret}, which it may not read")
    keys = as_list(st.get("Resource"))
    wanted = SECRET_KEYS.get(secret)
    if len(keys) != 1 or ref(keys[0]) is None:
        problem(f"{where}/{sid}: kms:Decrypt on {keys}, not one key parameter")
    elif wanted is not None and ref(keys[0]) != wanted:
        problem(f"{where}/{sid}: kms:Decrypt on {ref(keys[0])}, not {secret}'s key {wanted}")
