#!/usr/bin/env python3
"""The checks of scripts/sam-local.sh: `sam local invoke` of each built function against moto,
each answer and the store's state after it asserted. Exits 1 at the first failed check, with a
line starting `FAIL`. Run by scripts/sam-local.sh, which starts moto, the terminal simulator, the
TLS relay and the docker network this needs.

  --suite root      consumer (a lost answer, a new notification, its duplicate, a batch with a
                    re-fire and a poison body, an oversized body), metrics, reconciler, ingress
  --suite payments  payments' consumer (a charge, its duplicate) and reconciler (a lost answer)
  --break init      the root consumer without TERMINAL_BASE_URL: it cannot start
  --break answer    the root consumer replaced by a bootstrap that acknowledges every record
"""
import argparse
import base64
import hashlib
import hmac
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid

import boto3

REGION = "eu-west-1"
# The DynamoDB client's account-based endpoint: SAM sets AWS_ACCOUNT_ID=123456789012.
HOSTS = [f"{s}.{REGION}.amazonaws.com" for s in ("dynamodb", "sqs", "monitoring", "secretsmanager")] + [
    f"123456789012.ddb.{REGION}.amazonaws.com"]
TERMINAL = "https://terminal.sam-local.test:8443"
PAYMENTS = "https://terminal.sam-local.test:8444"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Acknowledges every batch without reading it: the consumer "broken on purpose" (--break answer).
ACK_ALL = """#!/bin/sh
api="http://$AWS_LAMBDA_RUNTIME_API/2018-06-01/runtime"
while :; do
  id=$(curl -sS -D - -o /dev/null "$api/invocation/next" | tr -d '\\r' | sed -n 's/^[Ll]ambda-[Rr]untime-[Aa]ws-[Rr]equest-[Ii]d: //p')
  curl -sS -X POST -d '{"batchItemFailures":[]}' "$api/invocation/$id/response" >/dev/null
done
"""


def fail(msg):
    print(f"FAIL {msg}", flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    print(f"ok   {msg}", flush=True)


class Run:
    def __init__(self, a):
        self.a = a
        self.ddb = boto3.client("dynamodb", endpoint_url=a.moto, region_name=REGION)
        self.sqs = boto3.client("sqs", endpoint_url=a.moto, region_name=REGION)
        self.cw = boto3.client("cloudwatch", endpoint_url=a.moto, region_name=REGION)
        self.sm = boto3.client("secretsmanager", endpoint_url=a.moto, region_name=REGION)
        self.tag = uuid.uuid4().hex[:8]
        self.work = os.path.join(a.work, f"{a.suite}-{self.tag}")
        os.makedirs(self.work)
        self.env = {}

    # --- the store ------------------------------------------------------------------------------
    def tables(self, idem, rows):
        attrs = [("pk", "S"), ("inflight_shard", "S"), ("created_at", "N"), ("multi_slot", "S")]
        self.ddb.create_table(
            TableName=idem, BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": n, "AttributeType": t} for n, t in attrs],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            GlobalSecondaryIndexes=[
                {"IndexName": "InFlight", "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": [
                    "event_key", "status", "lease_owner", "lease_until", "expires_at"]},
                 "KeySchema": [{"AttributeName": "inflight_shard", "KeyType": "HASH"},
                               {"AttributeName": "created_at", "KeyType": "RANGE"}]},
                {"IndexName": "MultiSlot", "Projection": {"ProjectionType": "KEYS_ONLY"},
                 "KeySchema": [{"AttributeName": "multi_slot", "KeyType": "HASH"}]}])
        self.ddb.create_table(
            TableName=rows, BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": "source_event", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "source_event", "KeyType": "HASH"}])

    def queue(self, name):
        self.sqs.create_queue(QueueName=name)
        # The name the function sees: the real endpoint's form (the relay maps it to moto).
        return f"https://sqs.{REGION}.amazonaws.com/123456789012/{name}"

    def moto_url(self, url):
        return self.sqs.get_queue_url(QueueName=url.rsplit("/", 1)[1])["QueueUrl"]

    def scan(self, table):
        items = self.ddb.scan(TableName=table, ConsistentRead=True)["Items"]
        return [{k: next(iter(v.values())) for k, v in i.items()} for i in items]

    def records(self):
        return [r for r in self.scan(self.env["IDEMPOTENCY_TABLE"]) if "status" in r]

    def manual(self):
        url, out = self.moto_url(self.env["MANUAL_QUEUE_URL"]), []
        while True:
            got = self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                           MessageAttributeNames=["All"]).get("Messages", [])
            if not got:
                return out
            out += [json.loads(m["Body"]) for m in got]

    # --- invoking -------------------------------------------------------------------------------
    def invoke(self, function, event, env, template, overrides=""):
        path = os.path.join(self.work, f"event-{uuid.uuid4().hex[:6]}.json")
        with open(path, "w") as f:
            json.dump(event, f)
        envs = os.path.join(self.work, "env.json")
        with open(envs, "w") as f:
            json.dump({function: env}, f)
        cmd = ["sam", "local", "invoke", function, "--template", template, "--event", path,
               "--env-vars", envs, "--docker-network", self.a.network, "--skip-pull-image",
               "--region", REGION,
               "--parameter-overrides", f"Architecture={self.a.arch} {overrides}".strip()]
        if os.environ.get("SAM_LOCAL_DEBUG"):
            cmd.append("--debug")
        for host in HOSTS + ["terminal.sam-local.test"]:
            cmd += ["--add-host", f"{host}:{self.a.gateway}"]
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
        logs = os.path.join(self.work, f"{function}-{uuid.uuid4().hex[:6]}.log")
        with open(logs, "w") as f:
            f.write(p.stderr)
        lines = [l for l in p.stdout.strip().splitlines() if l.strip()]
        if p.returncode != 0 or not lines:
            fail(f"sam local invoke {function} exited {p.returncode}: {p.stderr[-2000:]}")
        try:
            answer = json.loads(lines[-1])
        except json.JSONDecodeError:
            fail(f"{function} answered no JSON: {p.stdout[-500:]}")
        print(f"     {function} ({time.monotonic() - t0:.1f} s): {json.dumps(answer)[:300]}", flush=True)
        if isinstance(answer, dict) and "errorType" in answer:
            fail(f"{function} answered {answer['errorType']}: {answer.get('errorMessage')}")
        return answer

    def lose_next(self, port, count=1):
        with open(self.a.lose_flag, "w") as f:
            f.write(f"{self.a.gateway}:{port}\n{count}\n")

    def wait_lease(self, record):
        left = int(record["lease_until"]) / 1000 - time.time()
        time.sleep(max(0.0, left) + 1.5)


def sqs_event(records):
    """An SQS event in AWS's shape, one record per (message id, body)."""
    now = str(int(time.time() * 1000))
    return {"Records": [{
        "messageId": mid, "receiptHandle": base64.b64encode(mid.encode()).decode(), "body": body,
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": now,
                       "SenderId": "AROA3XFRBF535PLBQAARB:sam-local", "ApproximateFirstReceiveTimestamp": now},
        "messageAttributes": {}, "md5OfBody": hashlib.md5(body.encode()).hexdigest(),
        "eventSource": "aws:sqs", "eventSourceARN": f"arn:aws:sqs:{REGION}:123456789012:sam-local",
        "awsRegion": REGION} for mid, body in records]}


def dated_events(work):
    out = os.path.join(work, "events")
    subprocess.run([os.path.join(ROOT, "target/debug/sim"), "sample-events", "--out", out],
                   check=True, capture_output=True)
    return {n[:-5]: json.load(open(os.path.join(out, n))) for n in os.listdir(out)}


def failures(answer):
    return sorted(f["itemIdentifier"] for f in answer.get("batchItemFailures", [None]) if f)


# --- the root template --------------------------------------------------------------------------
def root_suite(r, template):
    ev = dated_events(r.work)
    idem, rows = f"gate-idem-{r.tag}", f"gate-bookings-{r.tag}"
    r.tables(idem, rows)
    manual, notifications = r.queue(f"gate-manual-{r.tag}"), r.queue(f"gate-notifications-{r.tag}")
    env = r.env = {
        "INTEGRATION_NAME": "ect-delta-slots", "STORE": "dynamodb", "IDEMPOTENCY_TABLE": idem,
        "BOOKINGS_TABLE": rows, "MANUAL_QUEUE_URL": manual, "TERMINAL_BASE_URL": TERMINAL,
        "TERMINAL_API_TOKEN_SECRET_ARN": "", "TERMINALS": "", "TERMINAL_TOKEN_SECRET_ARNS": "",
        # A short lease (the request timeout + 5 s): the stranded record is the reconciler's by
        # step 7. The timeout leaves room for a TLS handshake from a cold container on a loaded
        # machine; the lost answer is a reset connection, not a timeout.
        "TERMINAL_REQUEST_TIMEOUT_MS": "5000", "LEASE_FLOOR_MS": "1000",
        "RECONCILE_SWEEP_INTERVAL_SECONDS": "60"}
    consumer = dict(env)
    if r.a.brk == "init":
        del consumer["TERMINAL_BASE_URL"]
    if r.a.brk == "answer":
        broken = os.path.join(r.work, "build")
        shutil.copytree(os.path.dirname(template), broken)
        with open(os.path.join(broken, "ConsumerFunction", "bootstrap"), "w") as f:
            f.write(ACK_ALL)
        template = os.path.join(broken, "template.yaml")
    inv = lambda fn, event, e=env: r.invoke(fn, event, e, template, "ReconcilerTimeoutSeconds=30")

    # 1. The terminal makes the slot but its answer is lost, and so is the answer to the
    #    consumer's one re-send under the same key: the record must stay in_flight and the
    #    message be reported failed (SQS redelivers it; else the reconciler finishes it).
    stranded_body = ev["webhook-portbase"]["body"]
    r.lose_next(8443, 2)
    answer = inv("ConsumerFunction", sqs_event([("m-lost", stranded_body)]), consumer)
    check(failures(answer) == ["m-lost"], f"lost answer: batchItemFailures lists m-lost ({answer})")
    recs = r.records()
    check(len(recs) == 1 and recs[0]["status"] == "in_flight", f"lost answer: one in_flight record ({recs})")
    check(r.scan(rows) == [], "lost answer: no booking yet")
    stranded = recs[0]

    # 2. A new notification: one record committed, one booking of its container.
    answer = inv("ConsumerFunction", ev["notification"], consumer)
    check(failures(answer) == [], f"new notification: no batch item failure ({answer})")
    committed = [x for x in r.records() if x["status"] == "committed"]
    books = r.scan(rows)
    check(len(committed) == 1 and len(books) == 1, f"new notification: one committed record, one booking ({books})")
    check("CSQU3054383" in json.dumps(books[0]), "new notification: the booking is CSQU3054383's")
    first = books[0]

    # 3. Its duplicate (SQS delivers it again): suppressed, nothing new.
    answer = inv("ConsumerFunction", ev["notification"], consumer)
    check(failures(answer) == [], "duplicate: no batch item failure")
    check(r.scan(rows) == [first] and len(r.records()) == 2, "duplicate: the same one booking, no new record")

    # 4. A batch: a re-fire of one notification, another one, a poison body.
    answer = inv("ConsumerFunction", ev["batch-duplicates-poison"], consumer)
    check(failures(answer) == [], f"batch: no batch item failure ({answer})")
    text = json.dumps(r.scan(rows))
    check(len(r.scan(rows)) == 3 and "MWCU6059784" in text and "MSKU1234565" in text,
          "batch: two more bookings (MWCU6059784 once, MSKU1234565)")
    # 5. An oversized body (over the 64 KiB a notification may have).
    big = json.dumps({"notificationId": "PCS-CIS-OVERSIZED", "padding": "x" * (70 * 1024)})
    answer = inv("ConsumerFunction", sqs_event([("m-big", big)]), consumer)
    check(failures(answer) == [], "oversized: acknowledged, not retried")
    items = r.manual()
    # Both are `rejected`; the detail names the check the body failed (crates/gate/src/fields.rs).
    reasons = sorted((i["reason"], i["detail"].split(":", 1)[0]) for i in items)
    check(len(items) == 2 and all(r == "rejected" for r, _ in reasons)
          and any(d == "body_too_large" for _, d in reasons),
          f"manual queue: the poison and the oversized body, rejected ({reasons})")
    check(any(i["original_body"] == "{bad" for i in items), "manual queue: the poison body as sent")
    check(len(r.scan(rows)) == 3, "oversized: no booking")

    # 6. Metrics while the stranded record waits: one in_flight, published to CloudWatch.
    answer = inv("MetricsFunction", ev["scheduled-metrics"])
    check(json.dumps(answer).count("in_flight") >= 1, f"metrics: answered the store signals ({answer})")
    names = {m["MetricName"] for m in r.cw.list_metrics(Namespace="ExactlyOnceGate")["Metrics"]}
    # The names the template's alarms read (OldestInFlightAgeAlarm, DistinctEffectIdsAlarm).
    check({"OldestInFlightAgeSeconds", "MultiEffectKeys", "InFlightOlderThan10Minutes"} <= names,
          f"metrics: published to CloudWatch ({sorted(names)})")

    # 7. The reconciler after the lease ends: the stranded record committed with one booking,
    #    the terminal's replay of the first slot (no second claim).
    r.wait_lease(stranded)
    answer = inv("ReconcilerFunction", ev["scheduled-reconcile"])
    rec = next(x for x in r.records() if x["pk"] == stranded["pk"])
    check(rec["status"] == "committed", f"reconciler: the stranded record committed ({answer})")
    books = r.scan(rows)
    check(len(books) == 4 and sum("TGHU9876542" in json.dumps(b) for b in books) == 1,
          "reconciler: one booking for TGHU9876542")

    # 8. The ingress: a signed webhook queued (202), an unsigned one refused (401).
    secret = "whsec_bG9jYWwtb25seS1zYW1wbGUtc2VjcmV0LTMyYnl0ZXM="
    arn = r.sm.create_secret(Name=f"webhook-{r.tag}", SecretString=json.dumps({"active": [secret]}))["ARN"]
    ienv = {"INTEGRATION_NAME": "ect-delta-slots", "NOTIFICATION_QUEUE_URL": notifications,
            "WEBHOOK_SECRET_ARN": arn}
    hook = ev["webhook-portbase"]
    signed = json.loads(json.dumps(hook))
    ts, wid = str(int(time.time())), signed["headers"]["webhook-id"]
    mac = hmac.new(base64.b64decode(secret[6:]), f"{wid}.{ts}.{hook['body']}".encode(), hashlib.sha256)
    signed["headers"].update({"webhook-timestamp": ts, "webhook-signature": "v1," + base64.b64encode(mac.digest()).decode()})
    answer = inv("IngressFunction", signed, ienv)
    check(answer.get("statusCode") == 202, f"ingress: signed webhook answered 202 ({answer})")
    # Received with visibility 0: still there for the count after the unsigned request.
    got = r.sqs.receive_message(QueueUrl=r.moto_url(notifications), MaxNumberOfMessages=10,
                                VisibilityTimeout=0).get("Messages", [])
    check([m["Body"] for m in got] == [hook["body"]], "ingress: the webhook's body queued once")
    unsigned = json.loads(json.dumps(signed))
    del unsigned["headers"]["webhook-signature"]
    answer = inv("IngressFunction", unsigned, ienv)
    check(answer.get("statusCode") == 401, f"ingress: unsigned webhook answered 401 ({answer})")
    got = r.sqs.receive_message(QueueUrl=r.moto_url(notifications), MaxNumberOfMessages=10,
                                VisibilityTimeout=0).get("Messages", [])
    check([m["Body"] for m in got] == [hook["body"]], f"ingress: nothing more queued ({len(got)} messages)")


# --- payments' template -------------------------------------------------------------------------
class PaymentsApi(http.server.BaseHTTPRequestHandler):
    """A Stripe-like double: POST /v1/charges under an Idempotency-Key, 201 once per key, the
    stored answer replayed for the same key and body, 409 for another body."""
    keys, charges, lock = {}, [], threading.Lock()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        key = self.headers.get("Idempotency-Key")
        with self.lock:
            if self.path != "/v1/charges" or not key or self.headers.get("Authorization") != "Bearer sk_sam_local":
                status, out = 400, {"type": "bad_request"}
            elif key in self.keys:
                stored = self.keys[key]
                status, out = (stored[1], stored[2]) if stored[0] == body else (409, {"type": "idempotency_mismatch"})
            else:
                self.charges.append(body)
                status, out = 201, {"id": f"ch_{len(self.charges):06d}"}
                self.keys[key] = (body, status, out)
        data = json.dumps(out).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_):
        pass


def payments_suite(r, template):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", r.a.payments_port), PaymentsApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    idem, rows = f"pay-idem-{r.tag}", f"pay-charges-{r.tag}"
    r.tables(idem, rows)
    arn = r.sm.create_secret(Name=f"payments-key-{r.tag}", SecretString="sk_sam_local")["ARN"]
    env = r.env = {"INTEGRATION_NAME": "invoice-charges", "IDEMPOTENCY_TABLE": idem, "BOOKINGS_TABLE": rows,
                   "MANUAL_QUEUE_URL": r.queue(f"pay-manual-{r.tag}"), "PAYMENTS_API_URL": PAYMENTS,
                   "PAYMENTS_KEY_SECRET_ARN": arn, "LEASE_FLOOR_MS": "1000",
                   "RECONCILE_SWEEP_INTERVAL_SECONDS": "60"}
    inv = lambda fn, event: r.invoke(fn, event, env, template, "ReconcilerTimeoutSeconds=30")
    invoice = lambda n: json.dumps({"invoice_id": f"INV-{r.tag}-{n}", "customer": "cus_sam_local",
                                    "amount_minor": 12500, "currency": "EUR", "payment_method": "pm_card_visa"})
    answer = inv("ConsumerFunction", sqs_event([("i-1", invoice(1))]))
    check(failures(answer) == [], f"payments: a new invoice charged ({answer})")
    check(len(r.scan(rows)) == 1 and len(PaymentsApi.charges) == 1, "payments: one charge row, one charge at the API")
    answer = inv("ConsumerFunction", sqs_event([("i-1b", invoice(1))]))
    check(failures(answer) == [] and len(r.scan(rows)) == 1 and len(PaymentsApi.charges) == 1,
          "payments: its duplicate suppressed")
    r.lose_next(8444, 2)
    answer = inv("ConsumerFunction", sqs_event([("i-2", invoice(2))]))
    check(failures(answer) == ["i-2"], f"payments: a lost answer reported failed ({answer})")
    stranded = next(x for x in r.records() if x["status"] == "in_flight")
    r.wait_lease(stranded)
    inv("ReconcilerFunction", {"job": "reconcile"})
    rec = next(x for x in r.records() if x["pk"] == stranded["pk"])
    check(rec["status"] == "committed", "payments: the reconciler committed the stranded charge")
    check(len(r.scan(rows)) == 2 and len(PaymentsApi.charges) == 2,
          "payments: two charge rows, two charges at the API (the re-send replayed, not charged again)")
    server.shutdown()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("network", "gateway", "moto", "lose-flag", "work", "arch", "template"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--suite", choices=["root", "payments"], required=True)
    p.add_argument("--break", dest="brk", choices=["init", "answer"])
    p.add_argument("--payments-port", type=int, default=0)
    a = p.parse_args()
    r = Run(a)
    (root_suite if a.suite == "root" else payments_suite)(r, a.template)
    print(f"ok   {a.suite}: every check passed", flush=True)


if __name__ == "__main__":
    main()
