"""Deployment files: docker-compose.yml, the kustomize tree and the health-check script.

The schema checks run external tools (check-jsonschema, kustomize, kubernetes-validate;
scripts/test.sh installs them).
A missing tool skips its test on a developer's machine but fails it when CI is set,
so a CI machine that lacks one cannot pass by skipping.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from shared.config import KBConfig, Settings
from shared.profiles import OperatorProfiles
from shared.server import ServiceServer
from shared.tls import CALLERS

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
K8S_BASE = ROOT / "deploy" / "k8s" / "base"
SERVICES = ("parser", "indexer", "retriever", "reranker", "generator", "gateway", "worker")
STATEFUL = ("postgres", "redis")  # the control-plane database and the broker, each on its own volume
# the services that keep or read control-plane state (the parser reads none)
DATABASE_USERS = ("indexer", "retriever", "reranker", "generator", "gateway", "worker")
KUBERNETES_VERSION = "1.30.0"


def tool(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if path:
        return path
    if "CI" in os.environ:
        pytest.fail(f"{name} is not installed; CI must install it")
    pytest.skip(f"{name} is not installed")


def run(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=120)


def default_port(service: str) -> int:
    """The service's port in Settings defaults; `reranker-gpu` is the reranker."""
    base = service.removesuffix("-gpu")
    settings = Settings()
    return settings.port_of(getattr(settings, "gateway_grpc_addr" if base == "gateway" else f"{base}_addr"))


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def ragkb_compose_services() -> dict[str, dict]:
    """The long-running services of the ragkb image (not the one-shot certs job)."""
    return {name: spec for name, spec in compose()["services"].items()
            if str(spec.get("image", "")).startswith("ragkb") and spec.get("restart") != "no"}


def k8s_base() -> list[dict]:
    """Every object the base kustomization lists (before kustomize transforms them)."""
    kustomization = yaml.safe_load((K8S_BASE / "kustomization.yaml").read_text(encoding="utf-8"))
    docs = []
    for name in kustomization["resources"]:
        docs += [doc for doc in yaml.safe_load_all((K8S_BASE / name).read_text(encoding="utf-8")) if doc]
    return docs


def of_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == kind}


def module_file(command: list[str]) -> Path:
    assert command[:2] == ["python", "-m"], command
    return ROOT / (command[2].replace(".", "/") + ".py")


def compose_default(value: str) -> str:
    """`${VAR:-default}` -> `default` (compose interpolation); anything else unchanged."""
    if value.startswith("${") and ":-" in value:
        return value[value.index(":-") + 2:-1]
    return value


def assert_addresses(env: dict[str, str], hosts: set[str], where: str) -> None:
    for key, value in env.items():
        if key.endswith("_ADDR"):
            host, port = compose_default(str(value)).rsplit(":", 1)
            service = key.removeprefix("RAGKB_").removesuffix("_ADDR").removesuffix("_GRPC").lower()
            assert host in hosts, f"{where}: {key}={value} names no service"
            assert int(port) == default_port(service), f"{where}: {key}={value}"


@pytest.mark.unit
def test_compose_file_matches_the_compose_spec():
    result = run([tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)])
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.unit
def test_every_service_command_is_a_module_in_the_repo():
    commands = {f"compose {name}": spec["command"] for name, spec in ragkb_compose_services().items()}
    for name, deployment in of_kind(k8s_base(), "Deployment").items():
        commands[f"k8s {name}"] = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert {name.split()[1].removesuffix("-gpu") for name in commands} == set(SERVICES)
    for where, command in commands.items():
        assert module_file(command).is_file(), f"{where}: {command}"


@pytest.mark.unit
def test_compose_services_declare_every_setting():
    services = ragkb_compose_services()
    assert set(SERVICES) <= set(services)
    for name, spec in services.items():
        env = spec["environment"]
        assert set(env) == set(Settings.env_keys()), name
        assert env["RAGKB_DATA_DIR"] == "/data" and env["RAGKB_HOST"] == "0.0.0.0", name
        assert_addresses(env, set(compose()["services"]), f"compose {name}")
        assert spec["volumes"] == ["ragkb-tls:/tls:ro", "./deploy/compose/profiles.yaml:/etc/ragkb/profiles.yaml:ro"], \
            f"{name}: no volume is shared for state"
        assert env["RAGKB_DATABASE_URL"].startswith("postgresql://ragkb:"), name
        assert env["RAGKB_DATABASE_URL"].endswith("@postgres:5432/ragkb"), name
        assert spec["depends_on"]["postgres"] == {"condition": "service_healthy"}, name


@pytest.mark.unit
def test_compose_runs_postgres_and_redis_on_their_own_volumes():
    services = compose()["services"]
    postgres = services["postgres"]
    assert postgres["image"].startswith("postgres:15") and "pg_isready" in str(postgres["healthcheck"]["test"])
    assert postgres["volumes"] == ["postgres-data:/var/lib/postgresql/data"]
    assert services["redis"]["image"].startswith("redis:")
    assert "ragkb-data" not in compose()["volumes"]


@pytest.mark.unit
def test_configmap_declares_every_setting():
    docs = k8s_base()
    env = of_kind(docs, "ConfigMap")["ragkb-config"]["data"]
    assert set(env) == set(Settings.env_keys())
    assert env["RAGKB_DATA_DIR"] == "/data" and env["RAGKB_HOST"] == "0.0.0.0"
    assert_addresses(env, set(of_kind(docs, "Service")), "ConfigMap ragkb-config")


@pytest.mark.unit
def test_healthchecks_probe_each_service_port():
    for name, spec in ragkb_compose_services().items():
        test = spec["healthcheck"]["test"]
        assert test[1:3] == ["python", "scripts/grpc_health_check.py"], name
        assert test[test.index("--addr") + 1] == f"127.0.0.1:{default_port(name)}", name
        if name.removesuffix("-gpu") in CALLERS:  # mTLS servers: the check presents the service's certificate
            assert test[test.index("--identity") + 1] == name.removesuffix("-gpu"), name
    assert (ROOT / "scripts" / "grpc_health_check.py").is_file()


@pytest.mark.unit
def test_compose_services_wait_for_their_certificates_and_mount_them_read_only():
    services = compose()["services"]
    certs = services["certs"]
    assert certs["command"][2:] == ["ragkb", "certs", "init", "/tls", "--if-missing"] and certs["restart"] == "no"
    assert "ragkb-tls:/tls" in certs["volumes"]
    for name, spec in ragkb_compose_services().items():
        assert spec["depends_on"]["certs"] == {"condition": "service_completed_successfully"}, name
        assert "ragkb-tls:/tls:ro" in spec["volumes"], name
        assert spec["environment"]["RAGKB_TLS_DIR"] == "/tls", name
    profiles = OperatorProfiles.from_yaml((ROOT / "deploy" / "compose" / "profiles.yaml").read_text())
    assert profiles.vector_store["default"].uri == "http://milvus:19530"


@pytest.mark.unit
def test_every_k8s_service_is_complete_and_locked_down():
    docs = k8s_base()
    deployments = of_kind(docs, "Deployment")
    services = {name: doc for name, doc in of_kind(docs, "Service").items() if name not in STATEFUL}
    assert set(deployments) == set(services) == set(of_kind(docs, "HorizontalPodAutoscaler")) \
        == set(of_kind(docs, "PodDisruptionBudget")) == set(SERVICES)
    for name, deployment in deployments.items():
        port = default_port(name)
        pod = deployment["spec"]["template"]["spec"]
        container = pod["containers"][0]
        assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == 10001, name
        assert container["securityContext"]["readOnlyRootFilesystem"] is True, name
        assert {"name": "tmp", "emptyDir": {}} in pod["volumes"], name
        assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"], name
        assert {"name": "ragkb-config"} in [ref["configMapRef"] for ref in container["envFrom"]], name
        assert {"requests", "limits"} <= set(container["resources"]), name
        assert {"name": "grpc", "containerPort": port} in container["ports"], name
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            if name in CALLERS:  # mTLS: kubelet's gRPC probe cannot present a certificate
                command = container[probe]["exec"]["command"]
                assert command[1] == "scripts/grpc_health_check.py", f"{name} {probe}"
                assert command[3:] == [f"127.0.0.1:{port}", "--identity", name], f"{name} {probe}"
            else:
                assert container[probe]["grpc"] == {"port": port}, f"{name} {probe}"
        tls_volume = next(v for v in pod["volumes"] if v["name"] == "tls")
        assert tls_volume["secret"]["secretName"] == f"ragkb-tls-{name}", name  # its own certificate only
        assert {"name": "tls", "mountPath": "/tls", "readOnly": True} in container["volumeMounts"], name
        service_ports = {p["name"]: p["port"] for p in services[name]["spec"]["ports"]}
        assert service_ports["grpc"] == port, name
    assert {p["name"] for p in services["gateway"]["spec"]["ports"]} == {"grpc", "http"}


@pytest.mark.unit
def test_no_volume_is_shared_between_pods_and_state_has_its_own_stateful_sets():
    docs = k8s_base()
    assert of_kind(docs, "PersistentVolumeClaim") == {}  # no ReadWriteMany volume any more
    for name, deployment in of_kind(docs, "Deployment").items():
        pod = deployment["spec"]["template"]["spec"]
        assert not [v for v in pod["volumes"] if "persistentVolumeClaim" in v], name
        env = {e["name"]: e for e in pod["containers"][0].get("env", [])}
        if name in DATABASE_USERS:
            assert env["RAGKB_DATABASE_URL"]["valueFrom"] == {"secretKeyRef": {"name": "ragkb-database", "key": "url"}}
        else:
            assert "RAGKB_DATABASE_URL" not in env, name
    stateful, services = of_kind(docs, "StatefulSet"), of_kind(docs, "Service")
    assert set(stateful) == set(STATEFUL)
    for name, statefulset in stateful.items():
        (claim,) = statefulset["spec"]["volumeClaimTemplates"]
        assert claim["spec"]["accessModes"] == ["ReadWriteOnce"], name
        assert statefulset["spec"]["serviceName"] == name and name in services, name
        assert statefulset["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"], name
    postgres = stateful["postgres"]["spec"]["template"]["spec"]["containers"][0]
    assert postgres["image"].startswith("postgres:15")
    password = next(e for e in postgres["env"] if e["name"] == "POSTGRES_PASSWORD")
    assert password["valueFrom"] == {"secretKeyRef": {"name": "ragkb-database", "key": "password"}}
    policies = of_kind(docs, "NetworkPolicy")
    for name, callers in (("postgres", DATABASE_USERS), ("redis", ("gateway", "worker"))):
        (rule,) = policies[name]["spec"]["ingress"]
        assert {peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"] for peer in rule["from"]} == set(callers)


@pytest.mark.unit
def test_network_policies_admit_only_the_callers_of_each_inner_service():
    docs = k8s_base()
    policies = of_kind(docs, "NetworkPolicy")
    deny = policies["ragkb-default-deny"]["spec"]
    assert deny["podSelector"] == {"matchLabels": {"app.kubernetes.io/part-of": "ragkb"}} and "ingress" not in deny
    for name, callers in CALLERS.items():
        (rule,) = policies[name]["spec"]["ingress"]
        admitted = {peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"] for peer in rule["from"]}
        assert admitted == set(callers), name
        assert rule["ports"] == [{"port": default_port(name)}], name
    (public,) = policies["gateway"]["spec"]["ingress"]
    assert "from" not in public and {p["port"] for p in public["ports"]} == {8780, 50050}
    assert "worker" not in policies  # default deny: nothing calls the worker


@pytest.mark.unit
@pytest.mark.parametrize("overlay", ["dev", "prod", "gpu-reranker"])
def test_kustomize_overlay_is_valid_kubernetes(overlay):
    kustomize, validate = tool("kustomize"), tool("kubernetes-validate")
    rendered = run([kustomize, "build", f"deploy/k8s/overlays/{overlay}"])
    assert rendered.returncode == 0, rendered.stderr
    result = run([validate, "-k", KUBERNETES_VERSION, "--strict", "-"], stdin=rendered.stdout)
    problems = [line for line in (result.stdout + result.stderr).splitlines() if not line.startswith("INFO")]
    assert result.returncode == 0, "\n".join(problems)
    kinds = [doc["kind"] for doc in yaml.safe_load_all(rendered.stdout) if doc]
    assert kinds.count("Deployment") == len(SERVICES) and kinds.count("StatefulSet") == len(STATEFUL)


@pytest.mark.unit
def test_gpu_reranker_overlay_puts_the_reranker_on_a_gpu_with_mounted_bge_weights():
    rendered = run([tool("kustomize"), "build", "deploy/k8s/overlays/gpu-reranker"])
    assert rendered.returncode == 0, rendered.stderr
    docs = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    pod = of_kind(docs, "Deployment")["reranker"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "models")
    volume = next(v for v in pod["volumes"] if v["name"] == "models")
    assert mount["readOnly"] and volume["persistentVolumeClaim"]["claimName"] in of_kind(docs, "PersistentVolumeClaim")
    # no other layer asks for a GPU
    for name, deployment in of_kind(docs, "Deployment").items():
        if name != "reranker":
            assert "nvidia.com/gpu" not in str(deployment), name
    (kb_map,) = [doc for name, doc in of_kind(docs, "ConfigMap").items() if name.startswith("ragkb-kb-gpu-reranker")]
    (profiles_map,) = [doc for name, doc in of_kind(docs, "ConfigMap").items() if name.startswith("ragkb-profiles")]
    profiles = OperatorProfiles.from_yaml(profiles_map["data"]["profiles.yaml"])
    config = KBConfig.from_tenant_yaml(kb_map["data"]["kb.yaml"], name="docs", profiles=profiles).resolve(profiles)
    assert config.reranker.name == "bge" and config.reranker.device == "cuda"
    assert config.reranker.model.startswith(mount["mountPath"] + "/")
    assert config.vector_store.uri.startswith("http://")  # a Milvus server: indexer and retriever are separate pods


@pytest.mark.unit
def test_compose_example_kb_uses_the_compose_milvus_server_and_elasticsearch():
    path = ROOT / "deploy" / "kb-examples" / "compose-kb.yaml"
    profiles = OperatorProfiles.from_yaml((ROOT / "deploy" / "compose" / "profiles.yaml").read_text())
    config = KBConfig.from_tenant_yaml(path.read_text(encoding="utf-8"), name="docs", profiles=profiles)
    config = config.resolve(profiles)
    host, port = config.vector_store.uri.removeprefix("http://").rsplit(":", 1)
    assert host in compose()["services"] and port == "19530"
    assert config.keyword_store.name == "elasticsearch"
    assert config.keyword_store.hosts == ("http://elasticsearch:9200",) and "elasticsearch" in compose()["services"]


def load_health_check_script():
    spec = importlib.util.spec_from_file_location("grpc_health_check", ROOT / "scripts" / "grpc_health_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.unit
def test_health_check_script_exits_zero_only_when_serving(capsys):
    script = load_health_check_script()
    server = ServiceServer("probe", host="127.0.0.1", port=0)

    def check(*extra: str) -> tuple[int, str]:
        code = script.main(["--addr", server.address, "--timeout", "2", *extra])
        return code, capsys.readouterr().out.strip()

    server.start()
    try:
        assert check() == (1, "NOT_SERVING")
        server.mark_serving()
        assert check() == (0, "SERVING")
        assert check("--service", "no.such.Service") == (1, "SERVICE_UNKNOWN")
    finally:
        server.stop(0)
    assert check() == (1, "UNAVAILABLE")
