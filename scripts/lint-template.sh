#!/usr/bin/env bash
# `gatectl check-template` on this repository's templates, with the project's tools: the alarms
# against gate::signals, the policy rules (scripts/check-template-policy.py, built into gatectl),
# and the lint (sam validate --lint, cfn-lint --include-checks I, checkov) on each template and
# on the gate application it instantiates (sam/gate/template.yaml). A linter missing fails.
#
# Offline-safe: no AWS credentials or network (the region only selects cfn-lint's spec; checkov
# runs with --skip-download). A check is skipped only in the template, per resource, with
# `Metadata: checkov: skip:` and a comment (docs/SECURITY.md lists every skip with its reason).
# Usage: scripts/lint-template.sh [template ...]   (default: template.yaml and payments')
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${VENV:-$root/.venv}"
for tool in "$venv/bin/sam" "$venv/bin/cfn-lint" "$venv/checkov/bin/checkov"; do
    if [[ ! -x "$tool" ]]; then
        echo "lint-template: $tool not found: run scripts/tools.sh" >&2
        exit 2
    fi
done
# A copy of the binary just built: a target directory shared with another checkout may be
# rebuilt meanwhile.
cargo build -q -p gatectl
gatectl="$(mktemp -d)/gatectl"
trap 'rm -rf "$(dirname "$gatectl")"' EXIT
cp "${CARGO_TARGET_DIR:-$root/target}/debug/gatectl" "$gatectl"
export AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-eu-west-1}"
# The venv's python (PyYAML) runs the policy rules; checkov keeps a venv of its own.
export PATH="$venv/bin:$PATH:$venv/checkov/bin"
export GATECTL_PYTHON="$venv/bin/python"

status=0
if [[ $# -eq 0 ]]; then set -- "$root/template.yaml" "$root/examples/payments/template.yaml"; fi
for template in "$@"; do
    echo "lint-template: gatectl check-template --require-lint $template"
    "$gatectl" check-template --require-lint "$template" || status=1
done
exit $status
