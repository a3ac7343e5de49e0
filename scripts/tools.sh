#!/usr/bin/env bash
# Installs the test tools into ./.venv at pinned versions when they are missing:
# moto[server] (DynamoDB, SQS, CloudWatch, Secrets Manager on loopback), cargo-lambda (with zig),
# aws-sam-cli and cfn-lint (offline template checks), and checkov (the template's security scan,
# in a venv of its own). Idempotent: a second run installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
PINS=(
  "moto[server]==5.2.5"
  "cargo-lambda==1.9.2"
  "aws-sam-cli==1.170.0"
  "cfn-lint==1.58.0"
)
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
need=()
for pin in "${PINS[@]}"; do
  name="${pin%%==*}"; name="${name%%[*}"; want="${pin##*==}"
  have=$( ("$VENV/bin/python" -m pip show "$name" 2>/dev/null || true) | awk '/^Version:/{print $2}')
  if [ "$have" != "$want" ]; then need+=("$pin"); fi
done
if [ "${#need[@]}" -gt 0 ]; then
  echo "tools: installing ${need[*]}"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${need[@]}"
fi

# checkov pins its own boto3 (1.35), botocore and packaging, which would downgrade what
# aws-sam-cli and moto need in the venv above: it lives in .venv/checkov, its own venv
# (scripts/lint-template.sh runs .venv/checkov/bin/checkov).
CHECKOV_VENV="$VENV/checkov"
CHECKOV_PINS=(
  "checkov==3.3.30"
)
if [ ! -x "$CHECKOV_VENV/bin/python" ]; then
  python3 -m venv "$CHECKOV_VENV"
fi
need=()
for pin in "${CHECKOV_PINS[@]}"; do
  name="${pin%%==*}"; want="${pin##*==}"
  have=$( ("$CHECKOV_VENV/bin/python" -m pip show "$name" 2>/dev/null || true) | awk '/^Version:/{print $2}')
  if [ "$have" != "$want" ]; then need+=("$pin"); fi
done
if [ "${#need[@]}" -gt 0 ]; then
  echo "tools: installing ${need[*]} into $CHECKOV_VENV"
  "$CHECKOV_VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${need[@]}"
fi
