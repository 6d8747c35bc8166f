"""A throw-away CA and a server certificate for 127.0.0.1, made with `openssl` at test
time (never committed). EC P-256 keys: quick to make, served by rustls."""

import subprocess
from pathlib import Path


def run(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_certs(d: Path) -> tuple[Path, Path, Path]:
    """(ca.pem, server.pem, server.key) in `d`."""
    d.mkdir(parents=True, exist_ok=True)
    ca, ca_key = d / "ca.pem", d / "ca.key"
    cert, key, csr, ext = d / "server.pem", d / "server.key", d / "server.csr", d / "ext.cnf"
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(ca), "-days", "2",
        "-subj", "/CN=queen-test-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
    )
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(ext))
    return ca, cert, key
