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
# - values.schema.json must refuse replicas other than 1, 3 and 5 and
#   out-of-range keys; the templates must refuse, saying what to set, values
#   the schema cannot judge (a cluster without a token, ...).
# - `queen config print --config <rendered queen.toml>` runs with exactly the
#   container's env (secretKeyRef resolved from the rendered Secret, or a
#   stand-in value for an existingSecret), must exit 0 with no warning, and
#   its http_addr port must be the port every Service targets.
# - A cluster render (replicas 3 or 5): for every pod, the container's command
#   (the /bin/sh wrapper) runs as HOSTNAME=<fullname>-<ordinal> with
#   `config print --config ...` in place of `serve ...` and `queen` on PATH;
#   node_id must be ordinal + 1, peers every pod at the headless Service's
#   Raft port, cluster_addr the container's Raft port, the token from the
#   Secret; a HOSTNAME that is not one of the pods is refused. The
#   PodDisruptionBudget must keep a majority (maxUnavailable 1).
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
        "replicas: 2": {"replicas": 2},
        "replicas: 4": {"replicas": 4},
        "replicas: 0": {"replicas": 0},
        "cluster.token under 32 bytes": {"replicas": 3, "cluster": {"token": "short"}},
        "cluster.heartbeatMs above 1400": {"cluster": {"heartbeatMs": 1500}},
        "cluster.electionTimeoutMs above 7000": {"cluster": {"electionTimeoutMs": 8000}},
        "unknown cluster key": {"cluster": {"nodeId": 1}},
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


CLUSTER_TOKEN = "test-only-cluster-token-with-more-than-32-bytes"


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
        "replicas 3 without a cluster token": (
            {"replicas": 3}, "set cluster.existingSecret"),
        "replicas 3 without persistence": (
            {"replicas": 3, "cluster": {"token": CLUSTER_TOKEN}, "persistence": {"enabled": False}},
            "keep persistence on"),
        "replicas 3 with one kafka.advertisedAddr for every pod": (
            {"replicas": 3, "cluster": {"token": CLUSTER_TOKEN},
             "kafka": {"advertisedAddr": "kafka.example.com:9092"}},
            "leave kafka.advertisedAddr empty"),
        "a cluster port that is also the Kafka port": (
            {"replicas": 3, "cluster": {"token": CLUSTER_TOKEN, "port": 9092}},
            "give the Raft listener its own port"),
        "a cluster election timeout under 5 heartbeats": (
            {"replicas": 3, "cluster": {"token": CLUSTER_TOKEN, "heartbeatMs": 1400}},
            "raise electionTimeoutMs"),
        "a cluster token of 600 characters and 1200 bytes": (
            {"replicas": 3, "cluster": {"token": "\u00e9" * 600}}, "the broker needs 32 ..= 1008"),
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


def check_binary(label, objects, values):
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

    env = container_env(label, container, secrets)
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    replicas = sts[0]["spec"].get("replicas", 1)
    check_pdb(label, objects, sts[0], replicas)
    if replicas == 1:
        if "command" in container:
            fail(f"[{label}] a single replica runs a command {container['command']}: the image's entrypoint is the broker")
        proc = config_print(label, [QUEEN_BIN], toml_text, env)
        if proc is not None:
            check_pod(label, proc, env, pod, container, mounts, ports, services, verbose=True)
        return

    # A cluster: every pod runs the container's command (the wrapper) as its own
    # hostname, with `config print` in place of `serve ...`.
    command = container.get("command")
    if not command:
        fail(f"[{label}] replicas {replicas} without a command: no per-pod node id")
        return
    fullname = sts[0]["metadata"]["name"]
    if not values.get("affinity"):
        anti = pod.get("affinity", {}).get("podAntiAffinity", {})
        terms = [t.get("podAffinityTerm", {}) for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution", [])]
        pod_labels = sts[0]["spec"]["template"]["metadata"].get("labels", {})
        if not any(t.get("topologyKey") == "kubernetes.io/hostname"
                   and t.get("labelSelector", {}).get("matchLabels", {}).items() <= pod_labels.items()
                   for t in terms):
            fail(f"[{label}] replicas {replicas} without a preference for one member per Kubernetes node")
        else:
            ok(f"[{label}] the members prefer one Kubernetes node each")
    headless = check_headless(label, sts[0], services)
    domain = (values.get("cluster") or {}).get("clusterDomain") or "cluster.local"
    for bad in (f"{fullname}-{replicas}", f"other-{fullname}-0", f"{fullname}-01", ""):
        proc = config_print(label, command, toml_text, {**env, "HOSTNAME": bad})
        if proc is None:
            continue
        if proc.returncode == 0 or proc.stdout or "no node id" not in proc.stderr:
            fail(f"[{label}] the command ran with HOSTNAME={bad!r}: exit {proc.returncode}, {proc.stderr.strip()!r}")
        else:
            ok(f"[{label}] the command refuses HOSTNAME={bad!r}")
    for ordinal in range(replicas):
        pod_name = f"{fullname}-{ordinal}"
        plabel = f"{label} {pod_name}"
        proc = config_print(plabel, command, toml_text, {**env, "HOSTNAME": pod_name})
        if proc is None:
            continue
        if not check_pod(plabel, proc, env, pod, container, mounts, ports, services,
                         verbose=ordinal == 0):
            continue
        check_member(plabel, proc.stdout, ordinal, replicas, fullname, headless, domain, ports,
                     tls="tls_cert_file" in toml_text, verbose=ordinal != 0)


def container_env(label, container, secrets):
    """The container's env with every secretKeyRef resolved from the rendered Secrets."""
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
            continue
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if not ref:
            fail(f"[{label}] env {e['name']}: unsupported valueFrom {e.get('valueFrom')}")
            continue
        sec = next((s for s in secrets if s["metadata"]["name"] == ref["name"]), None)
        if sec is None:
            # existingSecret: not rendered; any 32+ byte value stands in.
            env[e["name"]] = "stand-in-for-existing-secret-0123456789"
        elif ref["key"] not in sec.get("data", {}):
            fail(f"[{label}] env {e['name']}: Secret {ref['name']} has no key {ref['key']}")
        else:
            env[e["name"]] = base64.b64decode(sec["data"][ref["key"]]).decode()
    return env


def config_print(label, command, toml_text, env):
    """Runs `<command> config print --config <toml>`; `queen` is found on PATH (as in the image)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "queen.toml")
        with open(path, "w") as f:
            f.write(toml_text)
        bindir = os.path.join(tmp, "bin")
        os.mkdir(bindir)
        os.symlink(os.path.abspath(QUEEN_BIN), os.path.join(bindir, "queen"))
        run_env = {**env, "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        try:
            return subprocess.run(
                [*command, "config", "print", "--config", path],
                env=run_env, cwd=tmp, capture_output=True, text=True, timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            fail(f"[{label}] {command[0]} config print did not run: {e}")
            return None


def check_pod(label, proc, env, pod, container, mounts, ports, services, verbose):
    """What every pod must show: exit 0, no warning, the ports the Services and probes use."""
    out, err = proc.stdout, proc.stderr
    if proc.returncode != 0:
        fail(f"[{label}] queen config print exited {proc.returncode}: {err.strip()}")
        return False
    if verbose:
        print("\n".join(f"     | {line}" for line in out.splitlines()))
    if "warning" in out.lower() or "warn" in err.lower():
        fail(f"[{label}] queen config print warned: {err.strip()}")
    m = re.search(r'^http_addr = "([^"]+):(\d+)"', out, re.M)
    if not m:
        fail(f"[{label}] no http_addr line in config print output")
        return False
    port = int(m.group(2))

    # The Kafka listener runs when kafka_enabled is true and no JWT secret is set.
    # The broker runs the Kafka port beside a JWT secret only with SASL users.
    sasl_users = re.search(r'^kafka_sasl_users_file = "', out, re.M)
    kafka_on = re.search(r"^kafka_enabled = true", out, re.M) and (
        "QUEEN_JWT_SECRET" not in env or sasl_users
    )
    k = re.search(r'^kafka_addr = "([^"]+):(\d+)"', out, re.M)
    c = re.search(r'^cluster_addr = "([^"]+):(\d+)"', out, re.M)
    listens = {
        "http": port,
        "kafka": int(k.group(2)) if (k and kafka_on) else None,
        "cluster": int(c.group(2)) if c else None,
    }
    if bool(kafka_on) != ("kafka" in ports):
        fail(f"[{label}] container port kafka {'missing' if kafka_on else 'present'} while the Kafka listener is {'on' if kafka_on else 'off'}")
    if bool(c) != ("cluster" in ports):
        fail(f"[{label}] container port cluster {'missing' if c else 'present'} while cluster_addr is {'set' if c else 'unset'}")
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
            elif verbose:
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
    # A cluster member hands its lead over before the drain: three election timeouts.
    peers = re.search(r'^peers = "?([^"\n#]*)', out, re.M)
    if g and peers and peers.group(1).strip():
        eto = re.search(r"^cluster_election_timeout_ms = (\d+)", out, re.M)
        handover = -(-3 * int(eto.group(1) if eto else 5000) // 1000)
        if int(g.group(1)) + handover >= grace:
            fail(f"[{label}] terminationGracePeriodSeconds {grace} does not cover shutdown_grace_secs"
                 f" and the {handover} s hand-over")
    ok(f"[{label}] queen config print accepts the rendered config and env")
    return True


def check_headless(label, sts, services):
    """The StatefulSet's headless Service: publishes unready pods and carries the Raft port."""
    name = sts["spec"].get("serviceName")
    svc = next((s for s in services if s["metadata"]["name"] == name), None)
    if svc is None:
        fail(f"[{label}] the StatefulSet's serviceName {name} is not a rendered Service")
        return {"name": name, "cluster_port": None}
    spec = svc["spec"]
    if spec.get("clusterIP") != "None" or spec.get("publishNotReadyAddresses") is not True:
        fail(f"[{label}] Service {name} is not headless with publishNotReadyAddresses: true")
    port = next((p["port"] for p in spec["ports"] if p.get("name") == "cluster"), None)
    if port is None:
        fail(f"[{label}] Service {name} does not carry the cluster port")
    return {"name": name, "cluster_port": port}


def check_member(label, out, ordinal, replicas, fullname, headless, domain, ports, tls, verbose):
    """One cluster pod's effective cluster keys, as the broker reads them."""
    def line(key):
        m = re.search(rf'^{key} = ("?)([^"\n]*?)\1\s+# (.*)$', out, re.M)
        return (m.group(2), m.group(3)) if m else (None, None)

    if verbose:
        print("\n".join(f"     | {l}" for l in out.splitlines()
                         if re.match(r"(node_id|peers|peer_http|cluster_addr|cluster_token|kafka_advertised_addr) ", l)))
    suffix = f"{headless['name']}.{NAMESPACE}.svc.{domain}"
    want = {
        "node_id": (str(ordinal + 1), "env QUEEN_NODE_ID"),
        "cluster_addr": (f"0.0.0.0:{ports.get('cluster')}", "env QUEEN_CLUSTER_ADDR"),
        "cluster_token": ("<set>", "env QUEEN_CLUSTER_TOKEN"),
        "peers": (",".join(f"{i + 1}={fullname}-{i}.{suffix}:{headless['cluster_port']}"
                           for i in range(replicas)), "env QUEEN_PEERS"),
        "peer_http": (",".join(f"{i + 1}={'https' if tls else 'http'}://{fullname}-{i}.{suffix}:{ports.get('http')}"
                               for i in range(replicas)), "env QUEEN_PEER_HTTP"),
    }
    if "kafka" in ports:
        want["kafka_advertised_addr"] = (f"{fullname}-{ordinal}.{suffix}:{ports['kafka']}",
                                         "env QUEEN_KAFKA_ADVERTISED_ADDR")
        # Every member lists every pod as a Kafka broker, at the address that pod advertises.
        want["peer_kafka"] = (",".join(f"{i + 1}={fullname}-{i}.{suffix}:{ports['kafka']}"
                                       for i in range(replicas)), "env QUEEN_PEER_KAFKA")
    good = True
    for key, (value, origin) in want.items():
        got = line(key)
        if got != (value, origin):
            good = False
            fail(f"[{label}] {key} is {got[0]!r} ({got[1]}), want {value!r} ({origin})")
    if good:
        ok(f"[{label}] node {ordinal + 1} of {replicas}: peers, peer_http, cluster_addr, token"
           + (", kafka address, peer_kafka" if "kafka" in ports else "") + " in effect")


def check_pdb(label, objects, sts, replicas):
    """A cluster keeps a majority through voluntary evictions; a single pod has no budget."""
    pdbs = find(objects, "PodDisruptionBudget")
    if replicas == 1:
        if pdbs:
            fail(f"[{label}] a single replica renders a PodDisruptionBudget")
        return
    pod_labels = sts["spec"]["template"]["metadata"].get("labels", {})
    if len(pdbs) != 1:
        fail(f"[{label}] replicas {replicas}: {len(pdbs)} PodDisruptionBudgets, want 1")
        return
    spec = pdbs[0]["spec"]
    match = spec.get("selector", {}).get("matchLabels", {})
    if spec.get("maxUnavailable") != 1 or not match or any(pod_labels.get(k) != v for k, v in match.items()):
        fail(f"[{label}] the PodDisruptionBudget is not maxUnavailable 1 over the StatefulSet's pods: {spec}")
    else:
        ok(f"[{label}] PodDisruptionBudget maxUnavailable 1 over the {replicas} pods")


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
            check_binary(label, objects, values)

if failures:
    print(f"\nchart-test: {len(failures)} failure(s)")
    for f in failures:
        print(f"  - {f}")
    sys.exit(1)
print("\nchart-test: all checks passed")
EOF
