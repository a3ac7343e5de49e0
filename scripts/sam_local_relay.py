#!/usr/bin/env python3
"""TLS in front of moto and the terminal simulator for `sam local invoke` (scripts/sam-local.sh).

The functions run in SAM's container exactly as deployed: the AWS SDK calls
https://dynamodb.eu-west-1.amazonaws.com and friends, and the consumer refuses a plain-http
terminal outside loopback. The step maps those names to its internal docker network's gateway
(`--add-host`) and this relay answers there with a certificate of the step's own CA (baked into
the local base image), forwarding the bytes to moto and the terminal simulator on loopback.

  certs DIR                  a CA and a server certificate for NAMES in DIR (once per image)
  serve --cert C --key K --listen IP:PORT=127.0.0.1:PORT ... [--lose-flag FILE]

`--lose-flag FILE`: while FILE exists, a connection to the listener named by its first line
(IP:PORT) forwards the request but drops the answer and closes: a terminal whose slot was made
and whose response was lost (the field's unknown outcome). Its second line, if any, is how many
connections in a row lose their answer (default 1); FILE is removed after the last.
"""
import argparse
import asyncio
import datetime
import os
import ssl
import sys

# SAM sets AWS_ACCOUNT_ID (123456789012) in the container, so the DynamoDB client uses its
# account-based endpoint, ACCOUNT.ddb.REGION.amazonaws.com, as it would in a deployed function.
AWS_NAMES = [f"{s}.eu-west-1.amazonaws.com" for s in ("dynamodb", "sqs", "monitoring", "secretsmanager")] + [
    "123456789012.ddb.eu-west-1.amazonaws.com"]
TERMINAL_NAME = "terminal.sam-local.test"


def make_certs(out):
    """A throwaway CA (its key discarded) and one server certificate for every name the step maps."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=1)
    until = now + datetime.timedelta(days=3650)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "exactly-once-gate sam-local test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(until)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, key_cert_sign=True, crl_sign=True,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names = AWS_NAMES + [TERMINAL_NAME]
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(until)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    os.makedirs(out, exist_ok=True)
    pem = serialization.Encoding.PEM
    with open(os.path.join(out, "ca.pem"), "wb") as f:
        f.write(ca.public_bytes(pem))
    with open(os.path.join(out, "server.pem"), "wb") as f:
        f.write(leaf.public_bytes(pem) + ca.public_bytes(pem))
    fd = os.open(os.path.join(out, "server.key"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


def handler(listen, target, lose_flag):
    host, port = target.rsplit(":", 1)

    async def handle(client_r, client_w):
        try:
            up_r, up_w = await asyncio.open_connection(host, int(port))
        except OSError as e:
            print(f"relay: {listen} -> {target}: {e}", file=sys.stderr, flush=True)
            client_w.close()
            return
        lose = False
        if lose_flag and os.path.exists(lose_flag):
            with open(lose_flag) as f:
                lines = f.read().split()
            lose = bool(lines) and lines[0] == listen
            left = int(lines[1]) - 1 if lose and len(lines) > 1 else 0
        if lose:
            # The request reaches the terminal; its answer is read and thrown away.
            if left > 0:
                with open(lose_flag, "w") as f:
                    f.write(f"{listen}\n{left}\n")
            else:
                os.unlink(lose_flag)
            forward = asyncio.ensure_future(pipe(client_r, up_w))
            await up_r.read(1)
            client_w.transport.abort()
            forward.cancel()
            up_w.close()
            print(f"relay: {listen}: answer dropped on purpose", file=sys.stderr, flush=True)
            return
        await asyncio.gather(pipe(client_r, up_w), pipe(up_r, client_w))

    return handle


async def serve(args):
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(args.cert, args.key)
    servers = []
    for spec in args.listen:
        listen, target = spec.split("=", 1)
        ip, port = listen.rsplit(":", 1)
        servers.append(await asyncio.start_server(handler(listen, target, args.lose_flag),
                                                  ip, int(port), ssl=ctx))
        print(f"relay: {listen} -> {target}", file=sys.stderr, flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("certs")
    c.add_argument("dir")
    s = sub.add_parser("serve")
    s.add_argument("--cert", required=True)
    s.add_argument("--key", required=True)
    s.add_argument("--listen", action="append", required=True)
    s.add_argument("--lose-flag")
    args = p.parse_args()
    if args.cmd == "certs":
        make_certs(args.dir)
    else:
        asyncio.run(serve(args))


if __name__ == "__main__":
    main()
