#!/usr/bin/env bash
# Lints template.yaml with both linters from the project venv; exits non-zero on any finding.
#
#   sam validate --lint          SAM transform + cfn-lint (errors and warnings fail)
#   cfn-lint --include-checks I  errors, warnings and informational findings all fail
#   checkov                      the security scan (CloudFormation/SAM checks); every failed check
#                                fails, a check is skipped only in the template, per resource,
#                                with `Metadata: checkov: skip:` and a comment
#                                (docs/SECURITY.md lists every skip with its reason)
#   check-template-policy.py     the project's own rules no scanner knows: one role per function,
#                                no "*" resource where one can be named, no wildcard or
#                                NotAction, each secret (and its KMS key) read only by its
#                                readers, DLQ retention above the source's,
#                                maxReceiveCount at least 5, tables with PITR and deletion
#                                protection, bounded SQS event sources, queue policies (who
#                                sends, who reads), the PITR window parameter
#
# Offline-safe: no AWS credentials or network needed (the region only selects cfn-lint's spec;
# checkov runs with --skip-download, so it fetches no policy metadata).
# Usage: scripts/lint-template.sh [--example] [template]   (default: template.yaml at the root)
#   --example   an integration's own stack (examples/payments/template.yaml): the three scanners
#               only; check-template-policy.py's rules name the truck-slot stack's resources and
#               parameters (the terminal token's secret, NotificationProducerArns, the operators'
#               managed policy), which such a stack does not have.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${VENV:-$root/.venv}"
example=false
if [[ "${1:-}" == "--example" ]]; then
    example=true
    shift
fi
template="${1:-$root/template.yaml}"

export AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-eu-west-1}"
export AWS_REGION="$AWS_DEFAULT_REGION"
export SAM_CLI_TELEMETRY=0

for tool in sam cfn-lint; do
    if [[ ! -x "$venv/bin/$tool" ]]; then
        echo "lint-template: $venv/bin/$tool not found" >&2
        echo "  install: $venv/bin/pip install aws-sam-cli==1.170.0 cfn-lint==1.58.0" >&2
        exit 2
    fi
done
checkov="$venv/checkov/bin/checkov"
if [[ ! -x "$checkov" ]]; then
    echo "lint-template: $checkov not found" >&2
    echo "  install: scripts/tools.sh (checkov==3.3.30 in a venv of its own, $venv/checkov)" >&2
    exit 2
fi

status=0

echo "lint-template: sam validate --lint $template"
if ! "$venv/bin/sam" validate --lint --template "$template" --region "$AWS_DEFAULT_REGION"; then
    status=1
fi

echo "lint-template: cfn-lint --include-checks I $template"
# cfn-lint's exit code is a bit mask (2 error, 4 warning, 8 informational); any bit fails.
if ! "$venv/bin/cfn-lint" --regions "$AWS_DEFAULT_REGION" --include-checks I -- "$template"; then
    status=1
fi

# The secrets framework too (checkov's default set has it): a connection-string example with a
# password in a parameter's description is a finding (CKV_SECRET_4).
echo "lint-template: checkov --framework cloudformation secrets $template"
if ! "$checkov" --file "$template" --framework cloudformation secrets --skip-download --compact \
    --quiet; then
    status=1
fi

if [[ $example == false ]]; then
    echo "lint-template: check-template-policy.py $template"
    if ! "$venv/bin/python" "$root/scripts/check-template-policy.py" "$template"; then
        status=1
    fi
fi

if [[ $status -eq 0 ]]; then
    echo "lint-template: no findings"
else
    echo "lint-template: findings above" >&2
fi
exit $status
