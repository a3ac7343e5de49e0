//! `scripts/check-template-policy.py` enforces the queue policies, the recovery window, the
//! smallest `maxReceiveCount` and the operators' managed policy (`gatectl`: reads everything,
//! writes only what its subcommands write): it passes on `template.yaml`, and fails, naming the
//! rule, on each way of breaking them. Needs `.venv/bin/python` with PyYAML (`make tools`).

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    integration_tests::lambda_watch::workspace_root()
}

/// Runs the script on `template` text; returns (success, stderr).
fn check(template: &str) -> (bool, String) {
    let path = std::env::temp_dir().join(integration_tests::unique("template-policy"));
    std::fs::write(&path, template).unwrap();
    let python = root().join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} missing: run `make tools`",
        python.display()
    );
    let out = Command::new(python)
        .arg(root().join("scripts/check-template-policy.py"))
        .arg(&path)
        .output()
        .expect("python runs");
    let _ = std::fs::remove_file(&path);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_template_passes_and_every_breach_is_named() {
    let template = std::fs::read_to_string(root().join("template.yaml")).unwrap();
    let (ok, stderr) = check(&template);
    assert!(ok, "{stderr}");

    let breaches = [
        (
            "anyone may send to the manual-booking queue",
            "          - Sid: DenySendExceptGateFunctions\n            Effect: Deny",
            "          - Sid: DenySendExceptGateFunctions\n            Effect: Allow",
            "ManualBookingQueue",
        ),
        (
            "the metrics role may read the manual-booking queue",
            "                  - !GetAtt ReconcilerRole.Arn\n                  - !Ref OperatorRoleArn",
            "                  - !GetAtt ReconcilerRole.Arn\n                  - !GetAtt MetricsRole.Arn\n                  - !Ref OperatorRoleArn",
            "exempts ['MetricsRole']",
        ),
        (
            "anyone may send notifications",
            "          - Sid: DenySendExceptNamedProducers\n            Effect: Deny",
            "          - Sid: DenySendExceptNamedProducers\n            Effect: Allow",
            "NotificationQueue",
        ),
        (
            "the dead-letter queue readable by all",
            "                aws:PrincipalArn: !Ref OperatorRoleArn\n",
            "                aws:PrincipalArn: !GetAtt MetricsRole.Arn\n",
            "NotificationDeadLetterQueue",
        ),
        (
            "a fixed recovery window",
            "RecoveryPeriodInDays: !Ref IdempotencyTableRecoveryDays",
            "RecoveryPeriodInDays: 35",
            "RecoveryPeriodInDays",
        ),
        (
            "TLS not required",
            "aws:SecureTransport: \"false\"",
            "aws:SecureTransport: \"true\"",
            "without TLS",
        ),
        (
            "a default operator",
            "  OperatorRoleArn:\n    Type: String\n",
            "  OperatorRoleArn:\n    Type: String\n    Default: arn:aws:iam::123456789012:role/Admin\n",
            "OperatorRoleArn has a default",
        ),
        (
            "MaxReceiveCount may be 1",
            "    MinValue: 5\n    MaxValue: 1000\n    Default: 5\n",
            "    MinValue: 1\n    MaxValue: 1000\n    Default: 5\n",
            "maxReceiveCount can be 1, below 5",
        ),
        (
            "MaxReceiveCount unbounded below",
            "    MinValue: 5\n    MaxValue: 1000\n    Default: 5\n",
            "    MaxValue: 1000\n    Default: 5\n",
            "maxReceiveCount can be anything, below 5",
        ),
        (
            "the webhook ingress reads the terminal's token",
            "                Action: secretsmanager:GetSecretValue\n                Resource: !Ref WebhookSecretArn",
            "                Action: secretsmanager:GetSecretValue\n                Resource: !Ref TerminalApiTokenSecretArn",
            "TerminalApiTokenSecretArn readable by ['IngressFunction']",
        ),
        (
            "the idempotency table created with Store=postgres",
            "  IdempotencyTable:\n    Type: AWS::DynamoDB::Table\n    Condition: UseDynamoDb\n",
            "  IdempotencyTable:\n    Type: AWS::DynamoDB::Table\n",
            "IdempotencyTable: a table without Condition UseDynamoDb",
        ),
        (
            "the metrics function in the VPC whatever the store",
            "      Role: !GetAtt MetricsRole.Arn\n      VpcConfig: !If\n        - InVpc\n",
            "      Role: !GetAtt MetricsRole.Arn\n      VpcConfig: !If\n        - HasAlarmEmail\n",
            "MetricsFunction: VpcConfig is not under Condition InVpc",
        ),
        (
            "the consumer not told the store",
            "          STORE: !Ref Store\n          IDEMPOTENCY_TABLE: !If [UseDynamoDb, !Ref IdempotencyTable, !Ref AWS::NoValue]\n          BOOKINGS_TABLE",
            "          IDEMPOTENCY_TABLE: !If [UseDynamoDb, !Ref IdempotencyTable, !Ref AWS::NoValue]\n          BOOKINGS_TABLE",
            "ConsumerFunction: uses the store but STORE is not the Store parameter",
        ),
        (
            "the webhook ingress reads the database's connection string",
            "                Action: secretsmanager:GetSecretValue\n                Resource: !Ref WebhookSecretArn",
            "                Action: secretsmanager:GetSecretValue\n                Resource: !Ref DatabaseUrlSecretArn",
            "DatabaseUrlSecretArn readable by ['IngressFunction']",
        ),
        (
            "the metrics function cannot read the database's connection string (Store=postgres)",
            "                - Sid: DatabaseUrl\n                  # Store=postgres: the connection string, read once per cold start.\n                  Effect: Allow\n                  Action: secretsmanager:GetSecretValue\n                  Resource: !Ref DatabaseUrlSecretArn\n                - !Ref AWS::NoValue\n              - !If\n                - DatabaseSecretHasCmk\n                - Sid: DatabaseUrlKey\n                  # Only for a customer managed key; aws/secretsmanager needs no permission.\n                  Effect: Allow\n                  Action: kms:Decrypt\n                  Resource: !Ref DatabaseUrlSecretKmsKeyArn\n                  Condition:\n                    StringEquals:\n                      kms:ViaService: !Sub\n                        - secretsmanager.${SecretRegion}.amazonaws.com\n                        - SecretRegion: !Select [3, !Split [\":\", !Ref DatabaseUrlSecretArn]]\n                      kms:EncryptionContext:SecretARN: !Ref DatabaseUrlSecretArn\n                - !Ref AWS::NoValue\n              - Sid: PublishSignals",
            "                - Sid: DatabaseUrl\n                  # Store=postgres: the connection string, read once per cold start.\n                  Effect: Allow\n                  Action: secretsmanager:GetObject\n                  Resource: !Ref DatabaseUrlSecretArn\n                - !Ref AWS::NoValue\n              - !If\n                - DatabaseSecretHasCmk\n                - Sid: DatabaseUrlKey\n                  # Only for a customer managed key; aws/secretsmanager needs no permission.\n                  Effect: Allow\n                  Action: kms:Decrypt\n                  Resource: !Ref DatabaseUrlSecretKmsKeyArn\n                  Condition:\n                    StringEquals:\n                      kms:ViaService: !Sub\n                        - secretsmanager.${SecretRegion}.amazonaws.com\n                        - SecretRegion: !Select [3, !Split [\":\", !Ref DatabaseUrlSecretArn]]\n                      kms:EncryptionContext:SecretARN: !Ref DatabaseUrlSecretArn\n                - !Ref AWS::NoValue\n              - Sid: PublishSignals",
            "MetricsFunction",
        ),
        (
            "a stack role other than the ingress may send notifications",
            ", !Ref OperatorRoleArn, !GetAtt IngressRole.Arn]]]\n            Action: sqs:SendMessage",
            ", !Ref OperatorRoleArn, !GetAtt IngressRole.Arn, !GetAtt MetricsRole.Arn]]]\n            Action: sqs:SendMessage",
            "allowed to ['MetricsRole']",
        ),
        (
            "the operators may delete manual-booking items",
            "              - sqs:ReceiveMessage\n              - sqs:ChangeMessageVisibility\n              - sqs:GetQueueAttributes\n",
            "              - sqs:ReceiveMessage\n              - sqs:DeleteMessage\n              - sqs:ChangeMessageVisibility\n              - sqs:GetQueueAttributes\n",
            "writes sqs:DeleteMessage on ManualBookingQueue, which no gatectl subcommand writes",
        ),
        (
            "the operators may delete records",
            "                - dynamodb:UpdateItem\n                - dynamodb:PutItem\n              Resource: !GetAtt IdempotencyTable.Arn",
            "                - dynamodb:UpdateItem\n                - dynamodb:PutItem\n                - dynamodb:DeleteItem\n              Resource: !GetAtt IdempotencyTable.Arn",
            "writes dynamodb:DeleteItem on IdempotencyTable",
        ),
        (
            "the operators cannot redrive",
            "            Action: sqs:SendMessage\n            Resource: !GetAtt NotificationQueue.Arn\n          - Sid: RedriveDelete",
            "            Action: sqs:GetQueueAttributes\n            Resource: !GetAtt NotificationQueue.Arn\n          - Sid: RedriveDelete",
            "sqs:SendMessage on NotificationQueue missing",
        ),
        (
            "the operators cannot scan for a container",
            "                - dynamodb:Scan\n                - dynamodb:DescribeTable\n              Resource:\n                - !GetAtt IdempotencyTable.Arn",
            "                - dynamodb:DescribeTable\n              Resource:\n                - !GetAtt IdempotencyTable.Arn",
            "cannot read: dynamodb:Scan on IdempotencyTable",
        ),
        (
            "the operators' stack read on every resource",
            "            Action: cloudformation:DescribeStacks\n            Resource: !Ref AWS::StackId",
            "            Action: cloudformation:DescribeStacks\n            Resource: \"*\"",
            "OperatorPolicy/FindTheStack: Resource '*'",
        ),
        (
            "the operators may not send to the manual-booking queue",
            "                - !GetAtt ReconcilerRole.Arn\n                - !Ref OperatorRoleArn\n            Action: sqs:SendMessage",
            "                - !GetAtt ReconcilerRole.Arn\n                - !GetAtt MetricsRole.Arn\n            Action: sqs:SendMessage",
            "allowed to ['MetricsRole']",
        ),
        (
            "the operators cannot reach a PostgreSQL store (its connection string)",
            "            - Sid: DatabaseUrl\n              Effect: Allow\n              Action: secretsmanager:GetSecretValue\n              Resource: !Ref DatabaseUrlSecretArn",
            "            - Sid: DatabaseUrl\n              Effect: Allow\n              Action: secretsmanager:DescribeSecret\n              Resource: !Ref DatabaseUrlSecretArn",
            "cannot read: secretsmanager:GetSecretValue on DatabaseUrlSecretArn",
        ),
        (
            "the terminals' tokens readable beyond their secrets",
            "                  Resource: !Ref TerminalTokenSecretArns\n",
            "                  Resource:\n                    - !Ref TerminalApiTokenSecretArn\n                    - !Ref TerminalTokenSecretArns\n",
            "GetSecretValue on",
        ),
        (
            "the database key decrypts any secret (no encryption context)",
            "                      kms:EncryptionContext:SecretARN: !Ref DatabaseUrlSecretArn\n",
            "",
            "ConsumerRole/DatabaseUrlKey: kms:Decrypt not limited to one secret",
        ),
        (
            "the webhook key decrypts outside Secrets Manager",
            "                      kms:ViaService: !Sub\n                        - secretsmanager.${SecretRegion}.amazonaws.com\n                        - SecretRegion: !Select [3, !Split [\":\", !Ref WebhookSecretArn]]\n",
            "",
            "IngressRole/WebhookSecretsKey: kms:Decrypt not limited to Secrets Manager",
        ),
        (
            "the ingress decrypts the database's secret",
            "                      kms:EncryptionContext:SecretARN: !Ref WebhookSecretArn\n",
            "                      kms:EncryptionContext:SecretARN: !Ref DatabaseUrlSecretArn\n",
            "IngressRole/WebhookSecretsKey: kms:Decrypt for DatabaseUrlSecretArn, which it may not read",
        ),
        (
            "the operators decrypt with any key",
            "              Action: kms:Decrypt\n              Resource: !Ref DatabaseUrlSecretKmsKeyArn\n",
            "              Action: kms:Decrypt\n              Resource: \"*\"\n",
            "OperatorPolicy/DatabaseUrlKey: kms:Decrypt on ['*'], not one key parameter",
        ),
        (
            "the operators' key grant also deletes records",
            "              Action: kms:Decrypt\n              Resource: !Ref DatabaseUrlSecretKmsKeyArn\n",
            "              Action:\n                - kms:Decrypt\n                - dynamodb:DeleteItem\n              Resource: !Ref DatabaseUrlSecretKmsKeyArn\n",
            "OperatorPolicy/DatabaseUrlKey: kms:Decrypt granted with ['dynamodb:deleteitem', 'kms:decrypt']",
        ),
        (
            "a lower-case kms:decrypt with no condition",
            "                  Action: kms:Decrypt\n                  Resource: !Ref WebhookSecretKmsKeyArn\n                  Condition:\n",
            "                  Action: kms:decrypt\n                  Resource: !Ref WebhookSecretKmsKeyArn\n                  NoCondition:\n",
            "IngressRole/WebhookSecretsKey: kms:Decrypt not limited to Secrets Manager",
        ),
        (
            "a ? wildcard in an action",
            "                  Action: kms:Decrypt\n                  Resource: !Ref WebhookSecretKmsKeyArn\n",
            "                  Action: kms:De?rypt\n                  Resource: !Ref WebhookSecretKmsKeyArn\n",
            "IngressRole/WebhookSecretsKey: wildcard action ['kms:de?rypt']",
        ),
        (
            "NotAction grants everything else",
            "                  Action: kms:Decrypt\n                  Resource: !Ref WebhookSecretKmsKeyArn\n",
            "                  NotAction: kms:Encrypt\n                  Resource: !Ref WebhookSecretKmsKeyArn\n",
            "IngressRole/WebhookSecretsKey: NotAction in an Allow statement",
        ),
        (
            "the key may serve another service too",
            "                      kms:ViaService: !Sub secretsmanager.${AWS::Region}.amazonaws.com\n",
            "                      kms:ViaService:\n                        - !Sub secretsmanager.${AWS::Region}.amazonaws.com\n                        - !Sub s3.${AWS::Region}.amazonaws.com\n",
            "ConsumerRole/TerminalApiTokensKey: kms:Decrypt not limited to Secrets Manager",
        ),
        (
            "the database's secret decrypted with the webhook's key",
            "                  Action: kms:Decrypt\n                  Resource: !Ref DatabaseUrlSecretKmsKeyArn\n",
            "                  Action: kms:Decrypt\n                  Resource: !Ref WebhookSecretKmsKeyArn\n",
            "ConsumerRole/DatabaseUrlKey: kms:Decrypt on WebhookSecretKmsKeyArn, not DatabaseUrlSecretArn's key DatabaseUrlSecretKmsKeyArn",
        ),
        (
            "a literal maxReceiveCount of 3",
            "maxReceiveCount: !Ref MaxReceiveCount",
            "maxReceiveCount: 3",
            "maxReceiveCount can be 3, below 5",
        ),
    ];
    for (what, from, to, named) in breaches {
        assert!(
            template.contains(from),
            "{what}: {from:?} not in the template"
        );
        let (ok, stderr) = check(&template.replacen(from, to, 1));
        assert!(!ok, "{what}: the check passed");
        assert!(stderr.contains(named), "{what}: {stderr}");
    }
}
