//! `scripts/check-template-policy.py` (the policy rules of `gatectl check-template`) on what a
//! template deploys, the template with its gate application (`sam/gate/template.yaml`) merged
//! in: it passes on `template.yaml` and payments', and fails, naming the rule, on each way of
//! breaking them in either file (the queue policies, the secrets' readers, the smallest
//! `maxReceiveCount`, the operators' managed policy, the functions the application schedules).
//! Needs `.venv/bin/python` with PyYAML (`make tools`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    integration_tests::lambda_watch::workspace_root()
}

/// Which file a breach edits.
enum File {
    Root,
    Gate,
}

/// Runs the script on `template` (at `dir/template.yaml`); returns (success, stderr).
fn run(template: &Path) -> (bool, String) {
    let python = root().join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} missing: run `make tools`",
        python.display()
    );
    let out = Command::new(python)
        .arg(root().join("scripts/check-template-policy.py"))
        .arg(template)
        .output()
        .expect("python runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs the script on a root template's text with the gate application's text beside it at
/// `sam/gate/template.yaml`, in a directory of its own.
fn check(template: &str, gate: &str) -> (bool, String) {
    let dir = std::env::temp_dir().join(integration_tests::unique("template-policy"));
    std::fs::create_dir_all(dir.join("sam/gate")).unwrap();
    std::fs::write(dir.join("template.yaml"), template).unwrap();
    std::fs::write(dir.join("sam/gate/template.yaml"), gate).unwrap();
    let result = run(&dir.join("template.yaml"));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

#[test]
fn both_templates_pass() {
    for path in ["template.yaml", "examples/payments/template.yaml"] {
        let (ok, stderr) = run(&root().join(path));
        assert!(ok, "{path}: {stderr}");
    }
}

#[test]
fn the_template_passes_and_every_breach_is_named() {
    let root_template = std::fs::read_to_string(root().join("template.yaml")).unwrap();
    let gate_template = std::fs::read_to_string(root().join("sam/gate/template.yaml")).unwrap();
    let (ok, stderr) = check(&root_template, &gate_template);
    assert!(ok, "{stderr}");

    let breaches = [
        (
            File::Gate,
            "anyone may send to the manual-booking queue",
            "          - Sid: DenySendExceptGateFunctions\n            Effect: Deny",
            "          - Sid: DenySendExceptGateFunctions\n            Effect: Allow",
            "ManualQueue",
        ),
        (
            File::Gate,
            "the metrics role may read the manual-booking queue",
            "                  - !GetAtt ReconcilerRole.Arn\n                  - !Ref OperatorRoleArn",
            "                  - !GetAtt ReconcilerRole.Arn\n                  - !GetAtt MetricsRole.Arn\n                  - !Ref OperatorRoleArn",
            "exempts ['MetricsRole']",
        ),
        (
            File::Gate,
            "anyone may send notifications",
            "          - Sid: DenySendExceptNamedProducers\n            Effect: Deny",
            "          - Sid: DenySendExceptNamedProducers\n            Effect: Allow",
            "EventQueue",
        ),
        (
            File::Gate,
            "the dead-letter queue readable by all",
            "                aws:PrincipalArn: !Ref OperatorRoleArn\n",
            "                aws:PrincipalArn: !GetAtt MetricsRole.Arn\n",
            "EventDeadLetterQueue",
        ),
        (
            File::Gate,
            "a fixed recovery window",
            "RecoveryPeriodInDays: !Ref IdempotencyTableRecoveryDays",
            "RecoveryPeriodInDays: 35",
            "RecoveryPeriodInDays",
        ),
        (
            File::Gate,
            "TLS not required",
            "aws:SecureTransport: \"false\"",
            "aws:SecureTransport: \"true\"",
            "without TLS",
        ),
        (
            File::Gate,
            "a default operator",
            "  OperatorRoleArn:\n    Type: String\n",
            "  OperatorRoleArn:\n    Type: String\n    Default: arn:aws:iam::123456789012:role/Admin\n",
            "OperatorRoleArn has a default",
        ),
        (
            File::Gate,
            "MaxReceiveCount may be 1",
            "    MinValue: 5\n    MaxValue: 1000\n    Default: 5\n",
            "    MinValue: 1\n    MaxValue: 1000\n    Default: 5\n",
            "maxReceiveCount can be 1, below 5",
        ),
        (
            File::Gate,
            "MaxReceiveCount unbounded below",
            "    MinValue: 5\n    MaxValue: 1000\n    Default: 5\n",
            "    MaxValue: 1000\n    Default: 5\n",
            "maxReceiveCount can be anything, below 5",
        ),
        (
            File::Root,
            "the webhook ingress reads the server's secrets",
            "                Action: secretsmanager:GetSecretValue\n                Resource: !Ref WebhookSecretArn",
            "                Action: secretsmanager:GetSecretValue\n                Resource: !Ref ServerSecretArns",
            "ServerSecretArns readable by IngressRole",
        ),
        (
            File::Gate,
            "the idempotency table created with Store=postgres",
            "  IdempotencyTable:\n    Type: AWS::DynamoDB::Table\n    Condition: UseDynamoDb\n",
            "  IdempotencyTable:\n    Type: AWS::DynamoDB::Table\n",
            "IdempotencyTable: a table without Condition UseDynamoDb",
        ),
        (
            File::Root,
            "the metrics function in the VPC whatever the store",
            "      Role: !GetAtt Gate.Outputs.MetricsRoleArn\n      VpcConfig: !If\n        - InVpc\n",
            "      Role: !GetAtt Gate.Outputs.MetricsRoleArn\n      VpcConfig: !If\n        - UsePostgres\n",
            "MetricsFunction: VpcConfig is not under Condition InVpc",
        ),
        (
            File::Root,
            "the consumer not told the store",
            "          STORE: !Ref Store\n          IDEMPOTENCY_TABLE: !If [UseDynamoDb, !GetAtt Gate.Outputs.IdempotencyTableName, !Ref AWS::NoValue]\n          BOOKINGS_TABLE",
            "          IDEMPOTENCY_TABLE: !If [UseDynamoDb, !GetAtt Gate.Outputs.IdempotencyTableName, !Ref AWS::NoValue]\n          BOOKINGS_TABLE",
            "ConsumerFunction: uses the store but STORE is not the Store parameter",
        ),
        (
            File::Root,
            "the webhook ingress reads the database's connection string",
            "                Action: secretsmanager:GetSecretValue\n                Resource: !Ref WebhookSecretArn",
            "                Action: secretsmanager:GetSecretValue\n                Resource: !Ref DatabaseUrlSecretArn",
            "DatabaseUrlSecretArn readable by IngressRole",
        ),
        (
            File::Gate,
            "the metrics function cannot read the database's connection string (Store=postgres)",
            "                - Sid: DatabaseUrl\n                  # Store=postgres: the connection string, read once per cold start.\n                  Effect: Allow\n                  Action: secretsmanager:GetSecretValue\n                  Resource: !Ref DatabaseUrlSecretArn\n                - !Ref AWS::NoValue\n              - !If\n                - DatabaseSecretHasCmk\n                - Sid: DatabaseUrlKey\n                  # Only for a customer managed key; aws/secretsmanager needs no permission.\n                  Effect: Allow\n                  Action: kms:Decrypt\n                  Resource: !Ref DatabaseUrlSecretKmsKeyArn\n                  Condition:\n                    StringEquals:\n                      kms:ViaService: !Sub\n                        - secretsmanager.${SecretRegion}.amazonaws.com\n                        - SecretRegion: !Select [3, !Split [\":\", !Ref DatabaseUrlSecretArn]]\n                      kms:EncryptionContext:SecretARN: !Ref DatabaseUrlSecretArn\n                - !Ref AWS::NoValue\n              - Sid: PublishSignals",
            "                - Sid: DatabaseUrl\n                  # Store=postgres: the connection string, read once per cold start.\n                  Effect: Allow\n                  Action: secretsmanager:GetObject\n                  Resource: !Ref DatabaseUrlSecretArn\n                - !Ref AWS::NoValue\n              - !If\n                - DatabaseSecretHasCmk\n                - Sid: DatabaseUrlKey\n                  # Only for a customer managed key; aws/secretsmanager needs no permission.\n                  Effect: Allow\n                  Action: kms:Decrypt\n                  Resource: !Ref DatabaseUrlSecretKmsKeyArn\n                  Condition:\n                    StringEquals:\n                      kms:ViaService: !Sub\n                        - secretsmanager.${SecretRegion}.amazonaws.com\n                        - SecretRegion: !Select [3, !Split [\":\", !Ref DatabaseUrlSecretArn]]\n                      kms:EncryptionContext:SecretARN: !Ref DatabaseUrlSecretArn\n                - !Ref AWS::NoValue\n              - Sid: PublishSignals",
            "MetricsRole: cannot read DatabaseUrlSecretArn",
        ),
        (
            File::Gate,
            "a stack role other than the ingress may send notifications",
            ", !Ref OperatorRoleArn]]]\n            Action: sqs:SendMessage",
            ", !Ref OperatorRoleArn, !GetAtt MetricsRole.Arn]]]\n            Action: sqs:SendMessage",
            "allowed to ['MetricsRole']",
        ),
        (
            File::Gate,
            "the operators may delete manual-booking items",
            "              - sqs:ReceiveMessage\n              - sqs:ChangeMessageVisibility\n              - sqs:GetQueueAttributes\n",
            "              - sqs:ReceiveMessage\n              - sqs:DeleteMessage\n              - sqs:ChangeMessageVisibility\n              - sqs:GetQueueAttributes\n",
            "writes sqs:DeleteMessage on ManualQueue, which no gatectl subcommand writes",
        ),
        (
            File::Gate,
            "the operators may delete records",
            "                - dynamodb:UpdateItem\n                - dynamodb:PutItem\n              Resource: !GetAtt IdempotencyTable.Arn",
            "                - dynamodb:UpdateItem\n                - dynamodb:PutItem\n                - dynamodb:DeleteItem\n              Resource: !GetAtt IdempotencyTable.Arn",
            "writes dynamodb:DeleteItem on IdempotencyTable",
        ),
        (
            File::Gate,
            "the operators cannot redrive",
            "            Action: sqs:SendMessage\n            Resource: !GetAtt EventQueue.Arn\n          - Sid: RedriveDelete",
            "            Action: sqs:GetQueueAttributes\n            Resource: !GetAtt EventQueue.Arn\n          - Sid: RedriveDelete",
            "sqs:SendMessage on EventQueue missing",
        ),
        (
            File::Gate,
            "the operators cannot scan for a container",
            "                - dynamodb:Scan\n                - dynamodb:DescribeTable\n              Resource:\n                - !GetAtt IdempotencyTable.Arn",
            "                - dynamodb:DescribeTable\n              Resource:\n                - !GetAtt IdempotencyTable.Arn",
            "cannot read: dynamodb:Scan on IdempotencyTable",
        ),
        (
            File::Gate,
            "the operators' stack read on every resource",
            "            Action: cloudformation:DescribeStacks\n            Resource: !Ref StackId",
            "            Action: cloudformation:DescribeStacks\n            Resource: \"*\"",
            "OperatorPolicy/FindTheStack: Resource '*'",
        ),
        (
            File::Gate,
            "the operators may not send to the manual-booking queue",
            "                - !GetAtt ReconcilerRole.Arn\n                - !Ref OperatorRoleArn\n            Action: sqs:SendMessage",
            "                - !GetAtt ReconcilerRole.Arn\n                - !GetAtt MetricsRole.Arn\n            Action: sqs:SendMessage",
            "allowed to ['MetricsRole']",
        ),
        (
            File::Gate,
            "the operators cannot reach a PostgreSQL store (its connection string)",
            "            - Sid: DatabaseUrl\n              Effect: Allow\n              Action: secretsmanager:GetSecretValue\n              Resource: !Ref DatabaseUrlSecretArn",
            "            - Sid: DatabaseUrl\n              Effect: Allow\n              Action: secretsmanager:DescribeSecret\n              Resource: !Ref DatabaseUrlSecretArn",
            "cannot read: secretsmanager:GetSecretValue on DatabaseUrlSecretArn",
        ),
        (
            File::Gate,
            "the terminals' tokens readable beyond their secrets",
            "                  Resource: !Ref ServerSecretArns\n",
            "                  Resource:\n                    - !Ref DatabaseUrlSecretArn\n                    - !Ref ServerSecretArns\n",
            "GetSecretValue on",
        ),
        (
            File::Gate,
            "the database key decrypts any secret (no encryption context)",
            "                      kms:EncryptionContext:SecretARN: !Ref DatabaseUrlSecretArn\n",
            "",
            "ConsumerRole/DatabaseUrlKey: kms:Decrypt not limited to one secret",
        ),
        (
            File::Root,
            "the webhook key decrypts outside Secrets Manager",
            "                      kms:ViaService: !Sub\n                        - secretsmanager.${SecretRegion}.amazonaws.com\n                        - SecretRegion: !Select [3, !Split [\":\", !Ref WebhookSecretArn]]\n",
            "",
            "IngressRole/WebhookSecretsKey: kms:Decrypt not limited to Secrets Manager",
        ),
        (
            File::Root,
            "the ingress decrypts the database's secret",
            "                      kms:EncryptionContext:SecretARN: !Ref WebhookSecretArn\n",
            "                      kms:EncryptionContext:SecretARN: !Ref DatabaseUrlSecretArn\n",
            "IngressRole/WebhookSecretsKey: kms:Decrypt for DatabaseUrlSecretArn, which it may not read",
        ),
        (
            File::Gate,
            "the operators decrypt with any key",
            "              Action: kms:Decrypt\n              Resource: !Ref DatabaseUrlSecretKmsKeyArn\n",
            "              Action: kms:Decrypt\n              Resource: \"*\"\n",
            "OperatorPolicy/DatabaseUrlKey: kms:Decrypt on ['*'], not one key parameter",
        ),
        (
            File::Gate,
            "the operators' key grant also deletes records",
            "              Action: kms:Decrypt\n              Resource: !Ref DatabaseUrlSecretKmsKeyArn\n",
            "              Action:\n                - kms:Decrypt\n                - dynamodb:DeleteItem\n              Resource: !Ref DatabaseUrlSecretKmsKeyArn\n",
            "OperatorPolicy/DatabaseUrlKey: kms:Decrypt granted with ['dynamodb:deleteitem', 'kms:decrypt']",
        ),
        (
            File::Root,
            "a lower-case kms:decrypt with no condition",
            "                  Action: kms:Decrypt\n                  Resource: !Ref WebhookSecretKmsKeyArn\n                  Condition:\n",
            "                  Action: kms:decrypt\n                  Resource: !Ref WebhookSecretKmsKeyArn\n                  NoCondition:\n",
            "IngressRole/WebhookSecretsKey: kms:Decrypt not limited to Secrets Manager",
        ),
        (
            File::Root,
            "a ? wildcard in an action",
            "                  Action: kms:Decrypt\n                  Resource: !Ref WebhookSecretKmsKeyArn\n",
            "                  Action: kms:De?rypt\n                  Resource: !Ref WebhookSecretKmsKeyArn\n",
            "IngressRole/WebhookSecretsKey: wildcard action ['kms:de?rypt']",
        ),
        (
            File::Root,
            "NotAction grants everything else",
            "                  Action: kms:Decrypt\n                  Resource: !Ref WebhookSecretKmsKeyArn\n",
            "                  NotAction: kms:Encrypt\n                  Resource: !Ref WebhookSecretKmsKeyArn\n",
            "IngressRole/WebhookSecretsKey: NotAction in an Allow statement",
        ),
        (
            File::Gate,
            "the key may serve another service too",
            "                      kms:ViaService: !Sub secretsmanager.${AWS::Region}.amazonaws.com\n",
            "                      kms:ViaService:\n                        - !Sub secretsmanager.${AWS::Region}.amazonaws.com\n                        - !Sub s3.${AWS::Region}.amazonaws.com\n",
            "ConsumerRole/ServerSecretsKey: kms:Decrypt not limited to Secrets Manager",
        ),
        (
            File::Gate,
            "the database's secret decrypted with the server's key",
            "                  Action: kms:Decrypt\n                  Resource: !Ref DatabaseUrlSecretKmsKeyArn\n",
            "                  Action: kms:Decrypt\n                  Resource: !Ref ServerSecretKmsKeyArn\n",
            "ConsumerRole/DatabaseUrlKey: kms:Decrypt on ServerSecretKmsKeyArn, not DatabaseUrlSecretArn's key DatabaseUrlSecretKmsKeyArn",
        ),
        (
            File::Gate,
            "a literal maxReceiveCount of 3",
            "maxReceiveCount: !Ref MaxReceiveCount",
            "maxReceiveCount: 3",
            "maxReceiveCount can be 3, below 5",
        ),
        (
            File::Root,
            "the parent's operator has a default",
            "  OperatorRoleArn:\n    Type: String\n",
            "  OperatorRoleArn:\n    Type: String\n    Default: arn:aws:iam::123456789012:role/Admin\n",
            "parameter OperatorRoleArn (the application's OperatorRoleArn) has a default",
        ),
        (
            File::Root,
            "the ingress sends but is not a producer the application names",
            "ProducerArns: !Join [\",\", [!Join [\",\", !Ref NotificationProducerArns], !GetAtt IngressRole.Arn]]",
            "ProducerArns: !Join [\",\", !Ref NotificationProducerArns]",
            "IngressRole/QueueNotifications: sends to EventQueue but is not in the application's ProducerArns",
        ),
        (
            File::Root,
            "the application schedules a reconciler of another name",
            "        ReconcilerFunctionName: !Sub ${AWS::StackName}-reconciler\n",
            "        ReconcilerFunctionName: !Sub ${AWS::StackName}-reconcile\n",
            "ReconcilerFunctionName",
        ),
        (
            File::Root,
            "the application on another store than the functions",
            "        Store: !Ref Store\n",
            "        Store: dynamodb\n",
            "Gate: its Store is not the template's Store parameter",
        ),
        (
            File::Root,
            "the consumer runs with the reconciler's role",
            "      Role: !GetAtt Gate.Outputs.ConsumerRoleArn\n",
            "      Role: !GetAtt Gate.Outputs.ReconcilerRoleArn\n",
            "shares role ReconcilerRole",
        ),
        (
            File::Root,
            "the application's outputs misnamed",
            "!GetAtt Gate.Outputs.ManualQueueUrl",
            "!GetAtt Gate.Outputs.ManualBookingQueueUrl",
            "Gate has no output ManualBookingQueueUrl",
        ),
    ];
    for (file, what, from, to, named) in breaches {
        let (root, gate) = match file {
            File::Root => (root_template.replacen(from, to, 1), gate_template.clone()),
            File::Gate => (root_template.clone(), gate_template.replacen(from, to, 1)),
        };
        assert!(
            root != root_template || gate != gate_template,
            "{what}: {from:?} not in the template"
        );
        let (ok, stderr) = check(&root, &gate);
        assert!(!ok, "{what}: the check passed");
        assert!(stderr.contains(named), "{what}: {stderr}");
    }
}
