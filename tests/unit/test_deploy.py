"""deploy/kubernetes/ and the Containerfile: valid against the Kubernetes schemas, hardened.

Every manifest is validated offline against the OpenAPI schemas that
``kubernetes-validate`` ships (strict: an unknown or misspelt field is an error), for the
oldest and the newest Kubernetes version this deployment supports. The overlays are
rendered with ``kubectl kustomize`` (kustomize built into kubectl) when kubectl is on the
PATH; without it those tests skip and say so, and the base files are still validated one
by one. No container engine runs in CI: the Containerfile is parsed and checked (known
instructions, COPY sources that exist, a non-root USER, the entrypoint, the healthcheck's
Python compiles), not built.
"""

from __future__ import annotations

import copy
import json
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

from skuferry.config.load import load_settings

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
OVERLAY = KUBE / "examples" / "two-workspaces"
CONTAINERFILE = ROOT / "Containerfile"
# CronJob timeZone is GA since 1.27; 1.28 is the oldest release these manifests promise.
VERSIONS = ("1.28.0", kubernetes_validate.latest_version())
WORKLOAD_KINDS = {"Deployment", "CronJob"}


# The kustomizations use `labels:` (kustomize 4.1), which kubectl embeds since 1.22.
KUBECTL_OLDEST = (1, 22)


def kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl not found: the overlays are rendered with `kubectl kustomize`")
    version = kubectl_version(found)
    if version < KUBECTL_OLDEST:
        pytest.skip(
            f"kubectl {version[0]}.{version[1]} at {found} embeds a kustomize older than "
            "these kustomizations need (kubectl >= 1.22)"
        )
    return found


def kubectl_version(path: str) -> tuple[int, int]:
    """kubectl's client (major, minor); a vendor suffix such as ``32+`` is dropped."""
    done = subprocess.run(
        [path, "version", "--client", "-o", "json"], capture_output=True, text=True, check=True
    )
    client = json.loads(done.stdout)["clientVersion"]
    return int(client["major"]), int(client["minor"].rstrip("+"))


def render(folder: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [kubectl(), "kustomize", str(folder)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


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


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    template = doc["spec"]["jobTemplate"]["spec"] if doc["kind"] == "CronJob" else doc["spec"]
    spec: dict[str, Any] = template["template"]["spec"]
    return spec


# --- every manifest validates -----------------------------------------------------------


@pytest.mark.parametrize("path", list(plain_manifests()), ids=lambda p: str(p.relative_to(KUBE)))
def test_each_manifest_file_validates_against_the_kubernetes_schemas(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    assert docs
    for doc in docs:
        validate(doc)


@pytest.mark.integration
@pytest.mark.parametrize("folder", ["base", "cronjob", "examples/two-workspaces"])
def test_each_rendered_kustomization_validates(folder: str) -> None:
    docs = render(KUBE / folder)
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


# --- what the workloads promise ---------------------------------------------------------


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return render(OVERLAY)


@pytest.mark.integration
def test_the_example_has_two_workspaces_each_in_its_own_namespace(
    rendered: list[dict[str, Any]],
) -> None:
    workloads = {
        (d["metadata"]["namespace"], d["kind"]) for d in rendered if d["kind"] in WORKLOAD_KINDS
    }
    assert workloads == {("skuferry-acme", "Deployment"), ("skuferry-globex", "CronJob")}
    namespaces = {d["metadata"]["name"] for d in rendered if d["kind"] == "Namespace"}
    assert namespaces == {"skuferry-acme", "skuferry-globex"}
    for doc in rendered:
        if doc["kind"] != "Namespace":
            workspace = doc["metadata"]["namespace"].removeprefix("skuferry-")
            assert doc["metadata"]["labels"]["skuferry.example.com/workspace"] == workspace


@pytest.mark.integration
def test_every_pod_is_locked_down(rendered: list[dict[str, Any]]) -> None:
    workloads = [d for d in rendered if d["kind"] in WORKLOAD_KINDS]
    assert len(workloads) == 2
    for doc in workloads:
        spec = pod_spec(doc)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] != 0
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec["automountServiceAccountToken"] is False
        for container in spec["containers"]:
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True
            assert security["allowPrivilegeEscalation"] is False
            assert security["capabilities"] == {"drop": ["ALL"]}
            assert container["resources"]["requests"]["memory"]
            assert container["resources"]["limits"]["memory"]


@pytest.mark.integration
def test_the_daemon_probes_healthz_and_is_scraped_on_a_named_port(
    rendered: list[dict[str, Any]],
) -> None:
    (deployment,) = [d for d in rendered if d["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    template = deployment["spec"]["template"]
    (container,) = template["spec"]["containers"]
    (port,) = container["ports"]
    assert port["name"] == "metrics"
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(port["containerPort"])
    assert annotations["prometheus.io/path"] == "/metrics"
    # The workspace's config listens where the probes and the scraper knock.
    config = workspace_config(rendered, "skuferry-acme")
    assert config["daemon"]["listen"].endswith(f":{port['containerPort']}")
    assert "args" not in container or container["args"][0] == "--config"


@pytest.mark.integration
def test_the_cronjob_never_overlaps_and_runs_one_sync(rendered: list[dict[str, Any]]) -> None:
    (cronjob,) = [d for d in rendered if d["kind"] == "CronJob"]
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    assert cronjob["spec"]["schedule"] == "43 */4 * * *"  # the overlay's patch applied
    (container,) = pod_spec(cronjob)["containers"]
    assert [*container["command"], *container["args"][:1]] == ["skuferry", "sync"]


@pytest.mark.integration
def test_keys_config_and_state_are_mounted_where_the_config_points(
    rendered: list[dict[str, Any]],
) -> None:
    for doc in (d for d in rendered if d["kind"] in WORKLOAD_KINDS):
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


def test_the_containerfile_runs_the_daemon_as_a_non_root_user() -> None:
    parsed = instructions(CONTAINERFILE.read_text(encoding="utf-8"))
    final = parsed[max(i for i, (word, _) in enumerate(parsed) if word == "FROM") :]
    users = [args for word, args in final if word == "USER"]
    assert users, "the final stage sets a USER"
    user = users[-1].split(":")[0]
    assert user not in {"0", "root"}
    (entrypoint,) = [json.loads(args) for word, args in final if word == "ENTRYPOINT"]
    assert entrypoint == ["skuferry", "run"]
    assert "skuferry" in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    (volume,) = [json.loads(args) for word, args in final if word == "VOLUME"]
    assert volume == ["/var/lib/skuferry"]
    (check,) = [args for word, args in final if word == "HEALTHCHECK"]
    command = json.loads(check[check.index("CMD") + 3 :])
    assert command[:2] == ["python", "-c"]
    compile(command[2], "HEALTHCHECK", "exec")  # the one-liner is valid Python
    assert "/healthz" in command[2]
    # The same uid as the manifests' runAsUser, so the state claim's files are its own.
    deployment = yaml.safe_load((KUBE / "base" / "deployment.yaml").read_text(encoding="utf-8"))
    assert str(deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"]) == user
