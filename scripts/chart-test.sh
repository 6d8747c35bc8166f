#!/usr/bin/env bash
# Lints, renders and validates charts/queen offline, then feeds the rendered
# queen.toml and container environment to the real binary.
#
#   ./scripts/chart-test.sh            (after `cargo build --release`)
#
# - Python packages (pinned) go into the repo's .venv: helm-python-sdk 0.2.2
#   (Helm 4's Go SDK as a bundled shared library, libhelm_c, driven through
#   ctypes: no helm binary and no download) and kubernetes-validate 1.37.0.
# - `helm lint --strict` and `helm template` are helm_python.lint(strict=True)
#   and Chart.render(); both run for the default values and for every
#   charts/queen/ci/*-values.yaml.
# - Every rendered object is validated (strict: unknown fields fail) against
#   the Kubernetes $K8S_VERSION schemas; the ServiceMonitor (a CRD the package
#   has no schema for) against the small schema written below.
# - values.schema.json must refuse replicas other than 1 and out-of-range keys.
# - `queen config print --config <rendered queen.toml>` runs with exactly the
#   container's env (secretKeyRef resolved from the rendered Secret, or a
#   stand-in value for an existingSecret), must exit 0 with no warning, and
#   its http_addr port must be the port every Service targets.
# Binary: $QUEEN_BIN, else ${CARGO_TARGET_DIR:-target}/release/queen.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
VENV=$REPO/.venv
K8S_VERSION=${K8S_VERSION:-1.33.0}
QUEEN_BIN=${QUEEN_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/queen}
PINS=(helm-python-sdk==0.2.2 kubernetes-validate==1.37.0)

if [[ ! -x $VENV/bin/python ]]; then
    python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" - "${PINS[@]}" <<'EOF'; then
import sys
from importlib.metadata import version, PackageNotFoundError
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    try:
        if version(name) != want:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
EOF
    echo "chart-test: installing ${PINS[*]} into .venv"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PINS[@]}"
fi

if [[ ! -x $QUEEN_BIN ]]; then
    echo "chart-test: $QUEEN_BIN not found; build it first (cargo build --release -p queenmq-broker)" >&2
    exit 1
fi

exec "$VENV/bin/python" - "$REPO/charts/queen" "$K8S_VERSION" "$QUEEN_BIN" <<'EOF'
import base64
import glob
import os
import re
import subprocess
import sys
import tempfile

import helm_python as helm
import jsonschema
import kubernetes_validate
import yaml

CHART, K8S_VERSION, QUEEN_BIN = sys.argv[1:4]
RELEASE, NAMESPACE = "queen", "messaging"
failures = []


def fail(msg):
    failures.append(msg)
    print(f"FAIL {msg}")


def ok(msg):
    print(f"ok   {msg}")


# What the chart's ServiceMonitor may contain: the subset of
# monitoring.coreos.com/v1 it uses, unknown fields refused.
SERVICE_MONITOR_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 253},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
                    },
                },
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["port", "path"],
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"const": "/metrics/prometheus"},
                            "interval": {"type": "string", "pattern": "^([0-9]+(ms|s|m|h))+$"},
                            "scrapeTimeout": {"type": "string", "pattern": "^([0-9]+(ms|s|m|h))+$"},
                        },
                    },
                },
            },
        },
    },
}


def load_values(path):
    if path is None:
        return {}
    with open(path) as f:
        return helm.values_from_yaml(f.read())


def lint(label, values):
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version=f"v{K8S_VERSION}")
    bad = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2]
    for m in report.get("messages", []):
        print(f"     lint[{label}] severity={m.get('severity')} {m.get('path')}: {m.get('error')}")
    if bad or report.get("errors"):
        fail(f"helm lint --strict [{label}]: {report.get('errors') or bad}")
    else:
        ok(f"helm lint --strict [{label}]")


def render(label, chart, values):
    try:
        chart.validate_schema(values)
        manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    except helm.HelmError as e:
        fail(f"render [{label}]: {e}")
        return []
    objects = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt") or not text.strip():
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                objects.append((path, doc))
    ok(f"helm template [{label}]: {len(objects)} objects")
    return objects


def validate(label, objects):
    for path, obj in objects:
        name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        try:
            if obj.get("kind") == "ServiceMonitor":
                jsonschema.validate(obj, SERVICE_MONITOR_SCHEMA)
                ok(f"validate [{label}] {name} (ServiceMonitor schema of this script)")
            else:
                v = kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
                ok(f"validate [{label}] {name} against Kubernetes {v}")
        except jsonschema.ValidationError as e:
            where = ".".join(str(p) for p in e.path)
            fail(f"validate [{label}] {name} ({path}): {where}: {e.message}")
        except Exception as e:  # SchemaNotFoundError and friends have .message
            fail(f"validate [{label}] {name} ({path}): {getattr(e, 'message', e)}")


def schema_refusals(chart):
    cases = {
        "replicas: 3": {"replicas": 3},
        "replicas: 0": {"replicas": 0},
        "config.max_body_bytes below 1024": {"config": {"max_body_bytes": 10}},
        "config.shutdown_grace_secs above 600": {"config": {"shutdown_grace_secs": 601}},
        "unknown config key": {"config": {"jwt_secret": "x"}},
        "unknown top-level key": {"replica": 1},
    }
    for label, values in cases.items():
        try:
            chart.validate_schema(values)
            fail(f"values.schema.json accepted {label}")
        except helm.HelmError:
            ok(f"values.schema.json refuses {label}")


def template_refusals(chart):
    """Values the schema accepts but the templates refuse with a message (`fail`)."""
    users = {"usersSecret": "queen-kafka-users"}
    cases = {
        "SASL users without a JWT secret or kafka.sasl.httpAuthDisabled": (
            {"kafka": {"sasl": users}}, "httpAuthDisabled"),
        "kafka.sasl.httpAuthDisabled beside a JWT secret": (
            {"kafka": {"sasl": {**users, "httpAuthDisabled": True}},
             "auth": {"jwtSecret": "test-only-secret-with-more-than-32-bytes"}},
            "contradicts"),
    }
    for label, (values, words) in cases.items():
        try:
            chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
            fail(f"the templates accepted {label}")
        except helm.HelmError as e:
            if words in str(e):
                ok(f"the templates refuse {label}")
            else:
                fail(f"the templates refuse {label} without saying why: {e}")


def find(objects, kind):
    return [o for _, o in objects if o.get("kind") == kind]


def check_binary(label, objects):
    sts = find(objects, "StatefulSet")
    cms = find(objects, "ConfigMap")
    secrets = find(objects, "Secret")
    services = find(objects, "Service")
    if len(sts) != 1 or not services:
        fail(f"[{label}] expected one StatefulSet and Services, got {len(sts)} / {len(services)}")
        return
    pod = sts[0]["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == "queen")
    args = container.get("args", [])
    if "--config" not in args:
        fail(f"[{label}] container args {args} do not pass --config")
        return
    config_path = args[args.index("--config") + 1]

    # The file behind --config: the mounted ConfigMap key.
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    toml_text = None
    for vname, m in mounts.items():
        prefix = m["mountPath"].rstrip("/") + "/"
        cm_ref = volumes.get(vname, {}).get("configMap")
        if cm_ref and config_path.startswith(prefix):
            key = config_path[len(prefix):]
            cm = next((c for c in cms if c["metadata"]["name"] == cm_ref["name"]), None)
            if cm and key in cm.get("data", {}):
                toml_text = cm["data"][key]
    if toml_text is None:
        fail(f"[{label}] {config_path} is not a key of a mounted, rendered ConfigMap")
        return

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
            continue
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if not ref:
            fail(f"[{label}] env {e['name']}: unsupported valueFrom {e.get('valueFrom')}")
            continue
        sec = next((s for s in secrets if s["metadata"]["name"] == ref["name"]), None)
        if sec is not None:
            env[e["name"]] = base64.b64decode(sec["data"][ref["key"]]).decode()
        else:
            # existingSecret: not rendered; any 32+ byte value stands in.
            env[e["name"]] = "stand-in-for-existing-secret-0123456789"

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "queen.toml")
        with open(path, "w") as f:
            f.write(toml_text)
        proc = subprocess.run(
            [QUEEN_BIN, "config", "print", "--config", path],
            env=env, cwd=tmp, capture_output=True, text=True, timeout=30,
        )
    if proc.returncode != 0:
        fail(f"[{label}] queen config print exited {proc.returncode}: {proc.stderr.strip()}")
        return
    out = proc.stdout
    print("\n".join(f"     | {line}" for line in out.splitlines()))
    if "warning" in out.lower() or "warn" in proc.stderr.lower():
        fail(f"[{label}] queen config print warned: {proc.stderr.strip()}")
    m = re.search(r'^http_addr = "([^"]+):(\d+)"', out, re.M)
    if not m:
        fail(f"[{label}] no http_addr line in config print output")
        return
    port = int(m.group(2))

    # The Kafka listener runs when kafka_enabled is true and no JWT secret is set.
    # The broker runs the Kafka port beside a JWT secret only with SASL users.
    sasl_users = re.search(r'^kafka_sasl_users_file = "', out, re.M)
    kafka_on = re.search(r"^kafka_enabled = true", out, re.M) and (
        "QUEEN_JWT_SECRET" not in env or sasl_users
    )
    k = re.search(r'^kafka_addr = "([^"]+):(\d+)"', out, re.M)
    listens = {"http": port, "kafka": int(k.group(2)) if (k and kafka_on) else None}
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    if bool(kafka_on) != ("kafka" in ports):
        fail(f"[{label}] container port kafka {'missing' if kafka_on else 'present'} while the Kafka listener is {'on' if kafka_on else 'off'}")
    if kafka_on:
        adv = re.search(r'^kafka_advertised_addr = "([^"]+)"', out, re.M)
        if not adv:
            fail(f"[{label}] the Kafka listener is on but no kafka_advertised_addr is set")
    for svc in services:
        for sp in svc["spec"]["ports"]:
            target = sp.get("targetPort", sp["port"])
            resolved = ports.get(target) if isinstance(target, str) else target
            want = listens.get(sp.get("name", "http"))
            if want is None or resolved != want:
                fail(f"[{label}] Service {svc['metadata']['name']} port {sp.get('name')} targets {target}={resolved}, the broker listens on {want}")
            else:
                ok(f"[{label}] Service {svc['metadata']['name']} port {sp['port']} -> {target} = the broker's {sp.get('name')} port {want}")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        p = container.get(probe, {}).get("httpGet", {}).get("port")
        if (ports.get(p) if isinstance(p, str) else p) != port:
            fail(f"[{label}] {probe} port {p} is not the broker's {port}")
    data_mount = mounts.get("data", {}).get("mountPath")
    if not re.search(rf'^data_dir = "{re.escape(str(data_mount))}"', out, re.M):
        fail(f"[{label}] data_dir is not the data volume mount {data_mount}")
    if "QUEEN_JWT_SECRET" in env and not re.search(r'^jwt_secret = "<set>"\s+# env QUEEN_JWT_SECRET', out, re.M):
        fail(f"[{label}] the JWT secret from the Secret is not in effect")
    grace = pod.get("terminationGracePeriodSeconds", 30)
    g = re.search(r"^shutdown_grace_secs = (\d+)", out, re.M)
    if not g or int(g.group(1)) >= grace:
        fail(f"[{label}] terminationGracePeriodSeconds {grace} does not exceed shutdown_grace_secs")
    ok(f"[{label}] queen config print accepts the rendered config and env")


value_sets = [("default", None)] + [
    (os.path.basename(p), p) for p in sorted(glob.glob(os.path.join(CHART, "ci", "*-values.yaml")))
]
print(f"helm-python-sdk {helm.__version__}, helm SDK {helm.helm_sdk_version()}, Kubernetes schemas {K8S_VERSION}")
with helm.Chart.load(CHART) as chart:
    schema_refusals(chart)
    template_refusals(chart)
    for label, path in value_sets:
        values = load_values(path)
        lint(label, values)
        objects = render(label, chart, values)
        kinds = sorted(o.get("kind") for _, o in objects)
        print(f"     [{label}] kinds: {kinds}")
        validate(label, objects)
        if objects:
            check_binary(label, objects)

if failures:
    print(f"\nchart-test: {len(failures)} failure(s)")
    for f in failures:
        print(f"  - {f}")
    sys.exit(1)
print("\nchart-test: all checks passed")
EOF
