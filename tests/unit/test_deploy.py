"""deploy/kubernetes/, the Containerfile and its lock: valid, hardened, and what they promise.

Every manifest is validated offline against the OpenAPI schemas that
``kubernetes-validate`` ships (strict: an unknown or misspelt field is an error), for the
oldest and the newest Kubernetes version this deployment supports. Every kustomization
(the variants and the examples) is rendered with ``kubectl kustomize`` (kustomize built
into kubectl; CI installs one when the machine has none) and the rendered objects are
checked: the image, the probes, the Pod Security Standard ``restricted``, one writer per
state volume, the shards. No container engine runs in CI: the Containerfile is parsed
and checked (known instructions, COPY sources that exist, a non-root USER, the
entrypoint, the healthcheck's Python, the hash-checked install), not built.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import shlex
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from skuferry.config.load import load_settings

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
OVERLAY = KUBE / "examples" / "two-workspaces"
FLEET = KUBE / "examples" / "sharded"
CONTAINERFILE = ROOT / "Containerfile"
LOCK = ROOT / "requirements.lock"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
IMAGE = f"registry.example.com/skuferry:{PYPROJECT['project']['version']}"
# CronJob timeZone is GA since 1.27, the pod-index label the shards read is set since
# 1.28: 1.28 is the oldest release these manifests promise.
VERSIONS = ("1.28.0", kubernetes_validate.latest_version())
WORKLOAD_KINDS = {"Deployment", "CronJob", "StatefulSet"}
# What a daemon in a pod must listen on: the kubelet and Prometheus knock on the pod's IP.
EVERY_INTERFACE = "0.0.0.0"  # noqa: S104 - a value the manifests must hold, bound by no test
DAEMON_KINDS = {"Deployment", "StatefulSet"}


# The kustomizations use `labels:` with includeTemplates and Components: kustomize 5,
# which kubectl embeds since 1.27.
KUBECTL_OLDEST = (1, 27)


def kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl not found: the overlays are rendered with `kubectl kustomize`")
    version = kubectl_version(found)
    if version < KUBECTL_OLDEST:
        pytest.skip(
            f"kubectl {version[0]}.{version[1]} at {found} embeds a kustomize older than "
            "these kustomizations need (kubectl >= 1.27)"
        )
    return found


def kubectl_version(path: str) -> tuple[int, int]:
    """kubectl's client (major, minor); a vendor suffix such as ``32+`` is dropped."""
    done = subprocess.run(
        [path, "version", "--client", "-o", "json"], capture_output=True, text=True, check=True
    )
    client = json.loads(done.stdout)["clientVersion"]
    return int(client["major"]), int(client["minor"].rstrip("+"))


@functools.cache
def _rendered_text(folder: Path) -> str:
    done = subprocess.run(
        [kubectl(), "kustomize", str(folder)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def render(folder: Path) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize folder`` renders (a fresh copy on each call)."""
    return [d for d in yaml.safe_load_all(_rendered_text(folder)) if d]


def kustomizations() -> list[Path]:
    """Every folder under deploy/kubernetes/ that renders on its own (not a Component)."""
    found = []
    for path in sorted(KUBE.rglob("kustomization.yaml")):
        if yaml.safe_load(path.read_text(encoding="utf-8"))["kind"] == "Kustomization":
            found.append(path.parent)
    return found


KUSTOMIZATIONS = kustomizations()
IDS = [str(p.relative_to(KUBE)) for p in KUSTOMIZATIONS]


def problems(doc: dict[str, Any]) -> list[str]:
    """Why ``doc`` is not a valid object of its kind, for each Kubernetes version checked."""
    found = []
    for version in VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(part) for part in exc.path) or "(top)"
            name = doc.get("metadata", {}).get("name")
            found.append(f"{doc.get('kind')} {name}, Kubernetes {version}: {where}: {exc.message}")
    return found


def validate(doc: dict[str, Any]) -> None:
    found = problems(doc)
    assert not found, "\n".join(found)


def plain_manifests() -> Iterator[Path]:
    """The resource files (not kustomizations) under deploy/kubernetes/."""
    for path in sorted(KUBE.rglob("*.yaml")):
        if path.name != "kustomization.yaml":
            yield path


def pod_template(doc: dict[str, Any]) -> dict[str, Any]:
    spec = doc["spec"]["jobTemplate"]["spec"] if doc["kind"] == "CronJob" else doc["spec"]
    template: dict[str, Any] = spec["template"]
    return template


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = pod_template(doc)["spec"]
    return spec


def workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in WORKLOAD_KINDS]


# --- every manifest validates -----------------------------------------------------------


def test_every_variant_and_example_is_found() -> None:
    """The parametrized tests below cover them all: a new folder is checked by itself."""
    assert {"base", "cronjob", "sharded", "examples/two-workspaces"} <= set(IDS)
    assert "examples/sharded" in IDS
    assert not any(i.startswith("components") for i in IDS)


@pytest.mark.parametrize("path", list(plain_manifests()), ids=lambda p: str(p.relative_to(KUBE)))
def test_each_manifest_file_validates_against_the_kubernetes_schemas(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    assert docs
    for doc in docs:
        validate(doc)


@pytest.mark.integration
@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=IDS)
def test_each_rendered_kustomization_validates(folder: Path) -> None:
    docs = render(folder)
    assert docs
    for doc in docs:
        validate(doc)


def test_the_validator_refuses_a_broken_manifest() -> None:
    """Not a vacuous check: a misspelt field and a wrong type are both refused."""
    good = yaml.safe_load((KUBE / "base" / "deployment.yaml").read_text(encoding="utf-8"))
    validate(good)
    misspelt = copy.deepcopy(good)
    container = misspelt["spec"]["template"]["spec"]["containers"][0]
    container["securityContex"] = container.pop("securityContext")
    assert any("securityContex" in p for p in problems(misspelt))
    wrong_type = copy.deepcopy(good)
    wrong_type["spec"]["replicas"] = "one"
    assert any("spec.replicas: 'one' is not of type" in p for p in problems(wrong_type))


# --- the image --------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=IDS)
def test_every_rendered_container_runs_the_release_image(folder: Path) -> None:
    """The CronJob too: an `images:` entry in the base alone never reached it."""
    found = workloads(render(folder))
    assert found
    for doc in found:
        spec = pod_spec(doc)
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            where = f"{doc['kind']} {doc['metadata']['name']} container {container['name']}"
            assert container["image"] == IMAGE, where


# --- probes -----------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=IDS)
def test_daemons_live_on_livez_and_are_ready_on_healthz(folder: Path) -> None:
    """A failed run (CMS down, key revoked) marks a daemon unready, never restarts it."""
    for doc in workloads(render(folder)):
        (container,) = pod_spec(doc)["containers"]
        if doc["kind"] not in DAEMON_KINDS:
            assert "livenessProbe" not in container  # a one-shot run serves no HTTP
            continue
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "metrics"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert "metrics" in ports
        annotations = pod_template(doc)["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == str(ports["metrics"])
        assert annotations["prometheus.io/path"] == "/metrics"


# --- the Pod Security Standard "restricted" ---------------------------------------------

# The Pod Security Standards (kubernetes.io/docs/concepts/security/pod-security-standards),
# the "restricted" profile at its latest version, which includes "baseline".
RESTRICTED_VOLUME_TYPES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}  # fmt: skip
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def restricted_violations(spec: dict[str, Any], annotations: dict[str, str]) -> list[str]:
    """What in a pod spec the Pod Security Standard ``restricted`` forbids (empty: none)."""
    found: list[str] = []
    pod = spec.get("securityContext", {})
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            found.append(f"{field} is set")
    if pod.get("windowsOptions", {}).get("hostProcess"):
        found.append("hostProcess is set")
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            found.append(f"volume {volume['name']}: type {sorted(kinds)} is not allowed")
    for sysctl in pod.get("sysctls", []):
        if sysctl["name"] not in SAFE_SYSCTLS:
            found.append(f"sysctl {sysctl['name']} is not in the safe set")
    for key, value in annotations.items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            found.append(f"AppArmor {key}={value}")
    containers = [
        *spec.get("initContainers", []),
        *spec["containers"],
        *spec.get("ephemeralContainers", []),
    ]
    for container in containers:
        name = container["name"]
        own = container.get("securityContext", {})
        if own.get("privileged"):
            found.append(f"{name}: privileged")
        if own.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation is not false")
        if any(p.get("hostPort") for p in container.get("ports", [])):
            found.append(f"{name}: hostPort")
        if own.get("procMount", "Default") != "Default":
            found.append(f"{name}: procMount {own['procMount']}")
        capabilities = own.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"{name}: capabilities do not drop ALL")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: adds capabilities {capabilities['add']}")
        non_root = own.get("runAsNonRoot", pod.get("runAsNonRoot"))
        if non_root is not True:
            found.append(f"{name}: runAsNonRoot is not true")
        if own.get("runAsUser", pod.get("runAsUser")) == 0:
            found.append(f"{name}: runAsUser 0")
        seccomp = own.get("seccompProfile", pod.get("seccompProfile", {})).get("type")
        if seccomp not in {"RuntimeDefault", "Localhost"}:
            found.append(f"{name}: seccompProfile {seccomp}")
        for context in (pod, own):
            selinux = context.get("seLinuxOptions", {})
            if selinux.get("type", "") not in SELINUX_TYPES or selinux.get("user", "") != "":
                found.append(f"{name}: seLinuxOptions {selinux}")
            if selinux.get("role", "") != "":
                found.append(f"{name}: seLinuxOptions {selinux}")
            apparmor = context.get("appArmorProfile", {}).get("type", "RuntimeDefault")
            if apparmor not in {"RuntimeDefault", "Localhost"}:
                found.append(f"{name}: appArmorProfile {apparmor}")
    return found


@pytest.mark.integration
@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=IDS)
def test_every_pod_meets_the_restricted_pod_security_standard(folder: Path) -> None:
    found = workloads(render(folder))
    assert found
    for doc in found:
        template = pod_template(doc)
        violations = restricted_violations(
            template["spec"], template["metadata"].get("annotations", {})
        )
        assert not violations, f"{doc['kind']} {doc['metadata']['name']}: {violations}"
        spec = template["spec"]
        assert spec["automountServiceAccountToken"] is False
        for container in spec["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert container["resources"]["requests"]["memory"]
            assert container["resources"]["limits"]["memory"]


@pytest.mark.integration
@pytest.mark.parametrize("folder", [OVERLAY, FLEET], ids=["two-workspaces", "sharded"])
def test_the_examples_namespaces_enforce_restricted(folder: Path) -> None:
    docs = render(folder)
    namespaces = [d for d in docs if d["kind"] == "Namespace"]
    assert namespaces
    for namespace in namespaces:
        labels = namespace["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert {d["metadata"]["namespace"] for d in docs if d["kind"] != "Namespace"} <= {
        n["metadata"]["name"] for n in namespaces
    }


def test_the_restricted_check_refuses_what_the_standard_forbids() -> None:
    """Not a vacuous check: each of these breaks the profile and is named."""
    good = yaml.safe_load((KUBE / "base" / "deployment.yaml").read_text(encoding="utf-8"))
    assert restricted_violations(pod_spec(good), {}) == []

    def broken(change: Any) -> list[str]:
        spec = copy.deepcopy(pod_spec(good))
        change(spec, spec["containers"][0])
        return restricted_violations(spec, {})

    assert broken(lambda s, c: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}}))
    assert broken(lambda s, c: c["securityContext"].pop("allowPrivilegeEscalation"))
    assert broken(lambda s, c: c["securityContext"]["capabilities"].update(drop=["NET_RAW"]))
    assert broken(lambda s, c: c["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]))
    assert broken(lambda s, c: s["securityContext"].pop("runAsNonRoot"))
    assert broken(lambda s, c: s["securityContext"].update(seccompProfile={"type": "Unconfined"}))
    assert broken(lambda s, c: c["securityContext"].update(runAsUser=0))
    assert broken(lambda s, c: s.update(hostNetwork=True))
    assert broken(lambda s, c: c["ports"][0].update(hostPort=9347))
    assert broken(lambda s, c: c["securityContext"].update(privileged=True))


# --- one writer per state volume --------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=IDS)
def test_every_state_volume_admits_one_pod(folder: Path) -> None:
    """ReadWriteOnce would let a second pod on the same node mount the state."""
    docs = render(folder)
    claims = [d["spec"] for d in docs if d["kind"] == "PersistentVolumeClaim"]
    for doc in docs:
        if doc["kind"] == "StatefulSet":
            claims += [t["spec"] for t in doc["spec"]["volumeClaimTemplates"]]
    assert claims
    for claim in claims:
        assert claim["accessModes"] == ["ReadWriteOncePod"]
    for doc in docs:
        if doc["kind"] == "Deployment":
            assert doc["spec"]["replicas"] == 1
            assert doc["spec"]["strategy"]["type"] == "Recreate"


# --- the two-workspaces example ---------------------------------------------------------


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return render(OVERLAY)


@pytest.mark.integration
def test_the_example_has_two_workspaces_each_in_its_own_namespace(
    rendered: list[dict[str, Any]],
) -> None:
    found = {(d["metadata"]["namespace"], d["kind"]) for d in workloads(rendered)}
    assert found == {("skuferry-acme", "Deployment"), ("skuferry-globex", "CronJob")}
    namespaces = {d["metadata"]["name"] for d in rendered if d["kind"] == "Namespace"}
    assert namespaces == {"skuferry-acme", "skuferry-globex"}
    for doc in rendered:
        if doc["kind"] != "Namespace":
            workspace = doc["metadata"]["namespace"].removeprefix("skuferry-")
            assert doc["metadata"]["labels"]["skuferry.example.com/workspace"] == workspace


@pytest.mark.integration
def test_each_workspace_pod_carries_its_workspace_label(rendered: list[dict[str, Any]]) -> None:
    for doc in workloads(rendered):
        workspace = doc["metadata"]["namespace"].removeprefix("skuferry-")
        labels = pod_template(doc)["metadata"]["labels"]
        assert labels["skuferry.example.com/workspace"] == workspace
        assert labels["app.kubernetes.io/name"] == "skuferry"
        if doc["kind"] == "Deployment":  # a selector is immutable: the label stays off it
            assert "skuferry.example.com/workspace" not in doc["spec"]["selector"]["matchLabels"]


@pytest.mark.integration
def test_the_daemon_listens_where_the_probes_knock(rendered: list[dict[str, Any]]) -> None:
    (deployment,) = [d for d in rendered if d["kind"] == "Deployment"]
    (container,) = pod_spec(deployment)["containers"]
    (port,) = container["ports"]
    assert port["name"] == "metrics"
    config = workspace_config(rendered, "skuferry-acme")
    host, _, listen_port = config["daemon"]["listen"].rpartition(":")
    assert host == EVERY_INTERFACE
    assert int(listen_port) == port["containerPort"]
    assert "args" not in container or container["args"][0] == "--config"


@pytest.mark.integration
def test_the_cronjob_never_overlaps_and_ends_its_run_before_the_deadline(
    rendered: list[dict[str, Any]],
) -> None:
    (cronjob,) = [d for d in rendered if d["kind"] == "CronJob"]
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    assert cronjob["spec"]["schedule"] == "43 */4 * * *"  # the overlay's patch applied
    job = cronjob["spec"]["jobTemplate"]["spec"]
    (container,) = pod_spec(cronjob)["containers"]
    argv = [*container["command"], *container["args"]]
    assert argv[0] == "timeout"
    sync = argv.index("skuferry")
    assert argv[sync : sync + 2] == ["skuferry", "sync"]
    options = argv[1:sync]
    assert "--signal=TERM" in options
    limit_s = int(options[-1])
    kill_after_s = int(next(o for o in options if o.startswith("--kill-after=")).split("=")[1])
    deadline_s = job["activeDeadlineSeconds"]
    # A first sync of a day fits; the run stops itself (SIGTERM, commit, exit) with time
    # left for the pod to be scheduled and pulled before Kubernetes would kill it.
    assert deadline_s >= 20 * 3600
    grace_s = pod_spec(cronjob)["terminationGracePeriodSeconds"]
    assert limit_s + kill_after_s + grace_s + 300 <= deadline_s
    assert job["backoffLimit"] == 0


@pytest.mark.integration
def test_keys_config_and_state_are_mounted_where_the_config_points(
    rendered: list[dict[str, Any]],
) -> None:
    for doc in workloads(rendered):
        namespace = doc["metadata"]["namespace"]
        spec = pod_spec(doc)
        volumes = {v["name"]: v for v in spec["volumes"]}
        (container,) = spec["containers"]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        config = workspace_config(rendered, namespace)
        assert volumes["keys"]["secret"]["secretName"] == "skuferry-keys"
        assert volumes["keys"]["secret"]["defaultMode"] == 0o440
        assert Path(config["api"]["api_keys_file"]).parent == Path(mounts["keys"])
        configmap = volumes["config"]["configMap"]["name"]
        assert configmap.startswith("skuferry-config-")  # the generated, hashed name
        assert Path(container["args"][-1]).parent == Path(mounts["config"])
        claim = volumes["state"]["persistentVolumeClaim"]["claimName"]
        assert claim in {
            d["metadata"]["name"]
            for d in rendered
            if d["kind"] == "PersistentVolumeClaim" and d["metadata"]["namespace"] == namespace
        }
        assert Path(config["state"]["path"]).parent == Path(mounts["state"])
        assert Path(config["metrics"]["textfile"]).parent == Path(mounts["state"])
        assert mounts["tmp"] == "/tmp"
        assert config["metrics"]["labels"] == {"workspace": namespace.removeprefix("skuferry-")}


def workspace_config(rendered: list[dict[str, Any]], namespace: str) -> dict[str, Any]:
    (configmap,) = [
        d for d in rendered if d["kind"] == "ConfigMap" and d["metadata"]["namespace"] == namespace
    ]
    data: dict[str, Any] = tomllib.loads(configmap["data"]["skuferry.toml"])
    return data


@pytest.mark.parametrize("workspace", ["acme", "globex"])
def test_each_workspace_config_loads_as_in_its_pod(workspace: str, tmp_path: Path) -> None:
    """The example configs load with skuferry's loader, the Secret's files in place."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "api_keys").write_text("k-one\nk-two\n")
    (secrets / "pim_token").write_text("pim-token\n")
    for secret in secrets.iterdir():
        secret.chmod(0o440)  # the Secret volume's defaultMode: owner and fsGroup only
    text = (OVERLAY / workspace / "skuferry.toml").read_text(encoding="utf-8")
    config = tmp_path / "skuferry.toml"
    config.write_text(text.replace("/run/secrets/skuferry/", f"{secrets}/"), encoding="utf-8")
    settings = load_settings(config, env={})
    assert len(settings.api_keys) == 2
    assert settings.metrics.labels == {"workspace": workspace}
    assert settings.state.path == Path("/var/lib/skuferry/state.db")


# --- the sharded variant ----------------------------------------------------------------


def shards(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (statefulset,) = [d for d in docs if d["kind"] == "StatefulSet"]
    return statefulset


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def expand(arg: str, env: dict[str, str]) -> str:
    """The kubelet's $(VAR) expansion of a container's args."""
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), arg)


@pytest.mark.integration
@pytest.mark.parametrize("folder", [KUBE / "sharded", FLEET], ids=["sharded", "examples/sharded"])
def test_each_shard_takes_its_part_from_its_pod_index(folder: Path) -> None:
    statefulset = shards(render(folder))
    spec = pod_spec(statefulset)
    (container,) = spec["containers"]
    env = env_of(container)
    index_from = env["SHARD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert index_from == "metadata.labels['apps.kubernetes.io/pod-index']"
    replicas = statefulset["spec"]["replicas"]
    assert env["SHARD_COUNT"]["value"] == str(replicas), "replicas and SHARD_COUNT disagree"
    argv = [*container["command"], *container["args"]]
    assert argv[:2] == ["skuferry", "run"]
    # Pod K of N runs --shard K/N: together the pods take shards 0 .. N-1, each once.
    taken = []
    for k in range(replicas):
        values = {"SHARD_INDEX": str(k), "SHARD_COUNT": env["SHARD_COUNT"]["value"]}
        expanded = [expand(a, values) for a in argv]
        taken.append(expanded[expanded.index("--shard") + 1])
    assert taken == [f"{k}/{replicas}" for k in range(replicas)]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    workspaces = argv[argv.index("--workspaces") + 1]
    (config_volume,) = [n for n, path in mounts.items() if path == workspaces]
    assert volumes[config_volume]["configMap"]["name"].startswith("skuferry-workspaces")
    host, _, port = argv[argv.index("--listen") + 1].rpartition(":")
    assert host == EVERY_INTERFACE
    assert int(port) == {p["name"]: p["containerPort"] for p in container["ports"]}["metrics"]
    # One volume per shard, from the claim template, and no claim per workspace.
    (template,) = statefulset["spec"]["volumeClaimTemplates"]
    assert mounts[template["metadata"]["name"]] == "/var/lib/skuferry"
    assert template["metadata"]["name"] not in volumes


@pytest.mark.integration
def test_the_shards_governing_service_selects_them() -> None:
    docs = render(FLEET)
    statefulset = shards(docs)
    (service,) = [d for d in docs if d["kind"] == "Service"]
    assert statefulset["spec"]["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    labels = pod_template(statefulset)["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert statefulset["spec"]["selector"]["matchLabels"].items() <= labels.items()


def fleet_configs() -> dict[str, str]:
    """The example fleet's workspace configs, as its ConfigMap carries them."""
    generated = yaml.safe_load((FLEET / "kustomization.yaml").read_text(encoding="utf-8"))
    (generator,) = generated["configMapGenerator"]
    return {Path(f).name: (FLEET / f).read_text(encoding="utf-8") for f in generator["files"]}


def projected_keys(statefulset: dict[str, Any]) -> dict[str, str]:
    """Path under the keys mount -> the Secret it comes from."""
    (keys,) = [v for v in pod_spec(statefulset)["volumes"] if v["name"] == "keys"]
    assert keys["projected"]["defaultMode"] == 0o440
    out = {}
    for source in keys["projected"]["sources"]:
        for item in source["secret"]["items"]:
            out[item["path"]] = source["secret"]["name"]
    return out


@pytest.mark.integration
def test_each_fleet_workspace_finds_its_own_keys_and_state_file() -> None:
    statefulset = shards(render(FLEET))
    (container,) = pod_spec(statefulset)["containers"]
    mounts = {m["name"]: Path(m["mountPath"]) for m in container["volumeMounts"]}
    keys = projected_keys(statefulset)
    configs = fleet_configs()
    assert len(configs) >= 2
    state_files: set[Path] = set()
    for filename, text in configs.items():
        name = filename.removesuffix(".toml")
        config = tomllib.loads(text)
        key_file = Path(config["api"]["api_keys_file"])
        relative = key_file.relative_to(mounts["keys"]).as_posix()
        assert keys[relative] == f"skuferry-keys-{name}", f"{name}: its keys are not mounted"
        hook = config.get("daemon", {}).get("hook_secret_file")
        if hook:
            assert keys[Path(hook).relative_to(mounts["keys"]).as_posix()].endswith(name)
        assert "listen" not in config.get("daemon", {}), f"{name}: the pod's --listen serves it"
        for path in (Path(config["state"]["path"]), Path(config["metrics"]["textfile"])):
            assert path.parent == mounts["state"]
            assert path not in state_files, f"{name}: {path} is another workspace's"
            state_files.add(path)


@pytest.mark.parametrize("filename", sorted(fleet_configs()))
def test_each_fleet_workspace_config_loads_as_in_its_shard(filename: str, tmp_path: Path) -> None:
    name = filename.removesuffix(".toml")
    secrets = tmp_path / "secrets" / name
    secrets.mkdir(parents=True)
    (secrets / "api_keys").write_text("k-one\n")
    (secrets / "hook_secret").write_text("s" * 32 + "\n")
    for secret in secrets.iterdir():
        secret.chmod(0o440)
    text = fleet_configs()[filename].replace("/run/secrets/skuferry/", f"{tmp_path}/secrets/")
    config = tmp_path / filename
    config.write_text(text, encoding="utf-8")
    settings = load_settings(config, env={})
    assert len(settings.api_keys) == 1
    assert settings.state.path == Path(f"/var/lib/skuferry/{name}.db")


# --- the NetworkPolicy ------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("folder", [OVERLAY, FLEET], ids=["two-workspaces", "sharded"])
def test_the_network_policy_opens_only_the_daemons_port(folder: Path) -> None:
    docs = render(folder)
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert policies
    for policy in policies:
        namespace = policy["metadata"]["namespace"]
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        selector = policy["spec"]["podSelector"]["matchLabels"]
        daemons = [
            d for d in docs if d["kind"] in DAEMON_KINDS and d["metadata"]["namespace"] == namespace
        ]
        assert daemons, f"the policy in {namespace} guards no daemon"
        for daemon in daemons:
            assert selector.items() <= pod_template(daemon)["metadata"]["labels"].items()
            (container,) = pod_spec(daemon)["containers"]
            names = {p["name"] for p in container["ports"]}
            for rule in policy["spec"]["ingress"]:
                assert rule["from"], "a rule without `from` admits everyone"
                assert {p["port"] for p in rule["ports"]} <= names


# --- the Containerfile ------------------------------------------------------------------

INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
    "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
}  # fmt: skip


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        word, _, rest = whole.partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, "the Containerfile ends inside a continued line"
    return out


def test_the_containerfile_parses_and_names_files_that_exist() -> None:
    parsed = instructions(CONTAINERFILE.read_text(encoding="utf-8"))
    assert {word for word, _ in parsed} <= INSTRUCTIONS
    stages = [args for word, args in parsed if word == "FROM"]
    assert len(stages) == 2 and " AS build" in stages[0], "multi-stage: build, then run"
    for word, args in parsed:
        if word != "COPY":
            continue
        parts = shlex.split(args)
        if parts[0].startswith("--from="):
            continue  # from the build stage
        *sources, _dest = parts
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such file in the repository"


def test_the_containerfile_installs_the_lock_with_hashes_and_nothing_else() -> None:
    """Two builds of one commit install the same files: only what the lock pins."""
    parsed = instructions(CONTAINERFILE.read_text(encoding="utf-8"))
    starts = [i for i, (word, _) in enumerate(parsed) if word == "FROM"]
    build = parsed[starts[0] : starts[1]]
    copied = [s for w, a in build if w == "COPY" for s in shlex.split(a)[:-1]]
    assert LOCK.name in copied
    commands = [c.strip() for w, a in build if w == "RUN" for c in a.split("&&")]
    installs = [shlex.split(c) for c in commands if " install " in c]
    assert installs, "the build stage installs nothing"
    for argv in installs:
        assert argv[0].endswith("/pip") and argv[1] == "install", argv
        if "-r" in argv:
            assert "--require-hashes" in argv
            assert argv[argv.index("-r") + 1] == LOCK.name
        else:  # the project itself: its dependencies are the lock's
            assert "--no-deps" in argv and argv[-1] == ".", argv
    assert any("-r" in argv for argv in installs)
    assert any(c.endswith("pip check") for c in commands)


def test_the_containerfile_runs_the_daemon_as_a_non_root_user() -> None:
    parsed = instructions(CONTAINERFILE.read_text(encoding="utf-8"))
    final = parsed[max(i for i, (word, _) in enumerate(parsed) if word == "FROM") :]
    users = [args for word, args in final if word == "USER"]
    assert users, "the final stage sets a USER"
    user = users[-1].split(":")[0]
    assert user not in {"0", "root"}
    (entrypoint,) = [json.loads(args) for word, args in final if word == "ENTRYPOINT"]
    assert entrypoint == ["skuferry", "run"]
    assert "skuferry" in PYPROJECT["project"]["scripts"]
    (volume,) = [json.loads(args) for word, args in final if word == "VOLUME"]
    assert volume == ["/var/lib/skuferry"]
    (check,) = [args for word, args in final if word == "HEALTHCHECK"]
    command = json.loads(check[check.index("CMD") + 3 :])
    assert command[:2] == ["python", "-c"]
    compile(command[2], "HEALTHCHECK", "exec")  # the one-liner is valid Python
    assert "/healthz" in command[2]
    # The same uid as the manifests' runAsUser, so the state claim's files are its own.
    for folder in ("base/deployment.yaml", "sharded/statefulset.yaml"):
        workload = yaml.safe_load((KUBE / folder).read_text(encoding="utf-8"))
        assert str(pod_spec(workload)["securityContext"]["runAsUser"]) == user


def build_commands(text: str) -> Iterator[str]:
    """Each `podman build` / `buildah bud|build` command in a text, continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    yield from re.findall(r"(?:podman build|buildah (?:bud|build))\b[^\n`]*", joined)


def test_every_documented_podman_build_keeps_the_healthcheck() -> None:
    """podman and buildah write OCI images unless told otherwise, and OCI has no HEALTHCHECK."""
    texts = [CONTAINERFILE, *sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
    found = []
    for path in texts:
        for command in build_commands(path.read_text(encoding="utf-8")):
            found.append(command)
            assert "--format docker" in command, f"{path.relative_to(ROOT)}: {command}"
    assert found
    assert list(build_commands("podman build -t x .")) == ["podman build -t x ."]


# --- the lock ---------------------------------------------------------------------------


def locked() -> dict[str, tuple[str, list[str]]]:
    """The lock's pins: canonical name -> (version, hashes)."""
    joined = re.sub(r"\\\n\s*", " ", LOCK.read_text(encoding="utf-8"))
    pins: dict[str, tuple[str, list[str]]] = {}
    for raw in joined.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        requirement, *options = line.split()
        name, _, version = requirement.partition("==")
        assert version, f"{requirement}: not pinned to one version"
        hashes = [o.removeprefix("--hash=") for o in options if o.startswith("--hash=sha256:")]
        assert len(hashes) == len(options), f"{requirement}: options other than hashes"
        pins[canonicalize_name(name)] = (version, hashes)
    return pins


def test_the_lock_pins_every_runtime_dependency_with_hashes() -> None:
    pins = locked()
    for name, (version, hashes) in pins.items():
        assert hashes, f"{name}=={version} has no hash: pip --require-hashes refuses it"
    for spec in PYPROJECT["project"]["dependencies"]:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name}: a runtime dependency missing from the lock"
        version = pins[name][0]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"the lock's {name}=={version} does not satisfy pyproject.toml's {spec!r}"
        )
    # Only runtime dependencies: no test or lint tool rides into the image.
    extras = PYPROJECT["project"]["optional-dependencies"]
    tools = {canonicalize_name(Requirement(s).name) for s in extras["dev"] if "skuferry" not in s}
    assert not tools & set(pins)
    assert "skuferry" not in pins


def test_the_lock_check_refuses_a_missing_or_unhashed_pin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = LOCK.read_text(encoding="utf-8")
    monkeypatch.setattr(f"{__name__}.LOCK", tmp_path / "requirements.lock")
    unhashed = re.sub(r"(httpx==[^ ]+) \\\n(\s*--hash=\S+ \\\n)*\s*--hash=\S+", r"\1", text)
    (tmp_path / "requirements.lock").write_text(unhashed, encoding="utf-8")
    assert locked()["httpx"][1] == []
    with pytest.raises(AssertionError, match="httpx"):
        test_the_lock_pins_every_runtime_dependency_with_hashes()
    missing = re.sub(r"(?m)^structlog==.*\n(\s+.*\n)*", "", text)
    (tmp_path / "requirements.lock").write_text(missing, encoding="utf-8")
    with pytest.raises(AssertionError, match="structlog"):
        test_the_lock_pins_every_runtime_dependency_with_hashes()
