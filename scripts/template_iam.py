"""Reading a CloudFormation template as deployed (its nested gate application merged in,
`load_template`), its IAM statements, and the rules one statement must keep on its own (its
shape, a KMS key's grant): the part of check-template-policy.py that knows IAM's and SAM's
grammar rather than the gate's resources."""

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
# (The gate application's; an integration's own secret may be read with any one key parameter.)
SECRET_KEYS = {
    "ServerSecretArns": "ServerSecretKmsKeyArn",
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


def _merge(base, over):
    """SAM's Globals: `over` (the function's own) wins; maps merge key by key."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base[k], v) if k in base else v
        return out
    return over


def _outputs_of(value, app, outputs):
    """`value` with every `!GetAtt APP.Outputs.X` replaced by output X's value of `app`'s template."""
    if isinstance(value, Tag):
        if value.name == "!GetAtt":
            target = value.value if isinstance(value.value, str) else ".".join(value.value)
            parts = target.split(".")
            if len(parts) == 3 and parts[0] == app and parts[1] == "Outputs":
                if parts[2] not in outputs:
                    raise ValueError(f"{app} has no output {parts[2]}")
                return outputs[parts[2]]["Value"]
        return Tag(value.name, _outputs_of(value.value, app, outputs))
    if isinstance(value, list):
        return [_outputs_of(v, app, outputs) for v in value]
    if isinstance(value, dict):
        return {k: _outputs_of(v, app, outputs) for k, v in value.items()}
    return value


def load_template(path):
    """A template as deployed: its Globals.Function folded into each function, every
    AWS::Serverless::Application with a local Location (resolved relative to the template)
    merged in: the application's resources, parameters and conditions beside the template's,
    each `!GetAtt APP.Outputs.X` replaced by the output's value, and each AWS::IAM::RolePolicy
    folded into its role's Policies. The parameters each application is given are kept under
    "Applications" ({logical id: {"Parameters": given, "Declared": its own, "Template": path}}),
    the template's own parameters under "OwnParameters".
    Raises ValueError when a logical id or an output is missing or defined twice."""
    from pathlib import Path

    path = Path(path)
    template = yaml.load(path.read_text(), Loader=Loader)
    resources = template.setdefault("Resources", {})
    glob = ((template.get("Globals") or {}).get("Function")) or {}
    for r in resources.values():
        if r.get("Type") == "AWS::Serverless::Function" and glob:
            r["Properties"] = _merge(glob, r.get("Properties") or {})
    template["OwnParameters"] = dict(template.get("Parameters") or {})
    apps = {}
    for name, r in list(resources.items()):
        if r.get("Type") != "AWS::Serverless::Application":
            continue
        location = (r.get("Properties") or {}).get("Location")
        if not isinstance(location, str) or "://" in location:
            continue
        nested_path = (path.parent / location).resolve()
        nested = load_template(nested_path)
        apps[name] = {"Parameters": (r.get("Properties") or {}).get("Parameters") or {},
                      "Template": nested_path, "Declared": nested.get("Parameters") or {}}
        del resources[name]
        template = _outputs_of(template, name, nested.get("Outputs") or {})
        resources = template["Resources"]
        for key in ("Resources", "Conditions", "Parameters"):
            section = template.setdefault(key, {})
            for k, v in (nested.get(key) or {}).items():
                if key == "Resources" and k in section:
                    raise ValueError(f"{k}: a resource of both {path} and {nested_path}")
                if key == "Parameters":
                    # The application's resources refer to its own declaration (its bounds);
                    # the template's stays under "OwnParameters".
                    section[k] = v
                else:
                    # A condition of both (UseDynamoDb): the same meaning.
                    section.setdefault(k, v)
        apps.update(nested.get("Applications") or {})
    for r in list(resources.values()):
        if r.get("Type") != "AWS::IAM::RolePolicy":
            continue
        props = r.get("Properties") or {}
        role = resources.get(ref(props.get("RoleName")) or "")
        if role is not None:
            role.setdefault("Properties", {}).setdefault("Policies", []).append(
                {"PolicyName": props.get("PolicyName"), "PolicyDocument": props.get("PolicyDocument")})
    template["Applications"] = apps
    return template
