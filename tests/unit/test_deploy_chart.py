"""The Helm chart ``deploy/helm/ranksight``: linted and rendered by Helm itself (its Go SDK, through the
``helm-python-sdk`` wheel: no helm binary is installable here), every rendered object validated against the Kubernetes
API schemas (``kubernetes-validate``, offline, strict: unknown fields fail), and the parts the agent and the aggregator
need checked by name."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.conftest import REPO

helm = pytest.importorskip(
    "helm_python", reason="helm-python-sdk (Helm's Go SDK) not installed: pip install -e '.[dev]'"
)
kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed")

CHART = REPO / "deploy" / "helm" / "ranksight"
KUBE_VERSION = "1.36.0"  # a version kubernetes-validate ships strict schemas for
EXTERNAL = {
    "nats": {"enabled": False, "url": "nats://nats.messaging:4222", "credentialsSecret": "ranksight-nats",
             "jetstreamReplicas": 3},
    "aggregator": {"http": {"tokenSecret": "ranksight-http"}},
    "agent": {"inspectorDumpDir": "/var/log/nccl-inspector", "gpuDevices": ["/dev/kfd", "/dev/dri"],
              "privileged": True},
}  # fmt: skip


IMAGE = {"repository": "registry.example/ranksight"}  # required: there is no public image


def with_image(values: dict[str, Any]) -> dict[str, Any]:
    return {**values, "image": {**IMAGE, **values.get("image", {})}}


def render(values: dict[str, Any], image: bool = True) -> dict[tuple[str, str], dict[str, Any]]:
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(with_image(values) if image else values, name="rs", namespace="ranksight")
    docs = [d for text in manifests.values() for d in yaml.safe_load_all(text) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize("values", [{}, EXTERNAL], ids=["bundled-nats", "external-nats-secrets-devices"])
def test_chart_lints_and_renders_valid_objects(values: dict[str, Any]) -> None:
    report = helm.chart.lint(str(CHART), with_image(values), strict=True, kube_version=f"v{KUBE_VERSION}")
    assert not report["errors"] and not [m for m in report["messages"] if m["severity"] >= 2], report
    objects = render(values)
    assert objects
    for (kind, name), obj in objects.items():
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)  # raises on a schema violation
        assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == "rs", (kind, name)


def test_bundled_nats_or_an_existing_url() -> None:
    bundled = render({})
    assert ("StatefulSet", "rs-ranksight-nats") in bundled
    agent = bundled[("DaemonSet", "rs-ranksight-agent")]["spec"]["template"]["spec"]["containers"][0]
    assert env_of(agent)["RANKSIGHT_NATS__URL"] == "nats://rs-ranksight-nats:4222"
    external = render(EXTERNAL)
    assert not [k for k in external if k[1].endswith("-nats")]
    agg = external[("StatefulSet", "rs-ranksight-aggregator")]["spec"]["template"]["spec"]["containers"][0]
    assert env_of(agg)["RANKSIGHT_NATS__URL"] == "nats://nats.messaging:4222"
    # an existing JetStream cluster keeps 3 copies; the bundled single-node NATS one
    assert env_of(agg)["RANKSIGHT_NATS__JETSTREAM_REPLICAS"] == "3"
    assert env_of(agent)["RANKSIGHT_NATS__JETSTREAM_REPLICAS"] == "1"
    with pytest.raises(helm.errors.HelmError, match=r"nats\.url is required"):
        render({"nats": {"enabled": False}})


def test_agent_daemonset_sees_the_node() -> None:
    spec = render(EXTERNAL)[("DaemonSet", "rs-ranksight-agent")]["spec"]["template"]["spec"]
    assert (
        spec["hostNetwork"] and spec["hostPID"]
    )  # RAS on the node's loopback, link probes, training processes
    [agent] = spec["containers"]
    mounts = {m["mountPath"]: m for m in agent["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert mounts["/host/sys"]["readOnly"] and volumes["sys"]["hostPath"]["path"] == "/sys"
    assert mounts["/var/log/nccl-inspector"]["readOnly"]
    assert {"/dev/kfd", "/dev/dri", "/run/ranksight"} <= set(mounts)
    env = env_of(agent)
    assert env["RANKSIGHT_AGENT__NODE"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["RANKSIGHT_AGENT__COLLECTORS__INSPECTOR__DUMP_DIR"] == "/var/log/nccl-inspector"
    assert env["RANKSIGHT_AGENT__COLLECTORS__GPU__SYSFS_ROOT"] == "/host/sys"
    assert env["RANKSIGHT_AGENT__COLLECTORS__APP__SOCKET_PATH"] == "/run/ranksight/app.sock"
    assert (
        env["RANKSIGHT_AGENT__COLLECTORS__HEARTBEAT__JOBS_DIR"] == "/run/ranksight/jobs"
    )  # the Slurm prolog's files
    assert env["RANKSIGHT_NATS__CREDS_FILE"] == "/etc/ranksight/nats/nats.creds"
    assert volumes["nats-creds"]["secret"]["secretName"] == "ranksight-nats"
    assert agent["ports"][0]["hostPort"] == 28100
    assert agent["resources"]["requests"] and agent["resources"]["limits"]


def test_aggregator_statefulset_keeps_its_database_on_a_volume() -> None:
    sts = render(EXTERNAL)[("StatefulSet", "rs-ranksight-aggregator")]["spec"]
    [claim] = sts["volumeClaimTemplates"]
    [agg] = sts["template"]["spec"]["containers"]
    mounts = {m["name"]: m["mountPath"] for m in agg["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == env_of(agg)["RANKSIGHT_STATE_DIR"]
    assert env_of(agg)["RANKSIGHT_AGGREGATOR__HTTP__TOKEN"] == {
        "secretKeyRef": {"name": "ranksight-http", "key": "token"}
    }
    assert sts["template"]["spec"]["securityContext"]["runAsNonRoot"]
    assert agg["resources"]["requests"] and agg["resources"]["limits"]


def test_settings_the_chart_sets_exist() -> None:
    """Every RANKSIGHT_ variable the chart sets is a setting (the agent and aggregator reject unknown ones at start)."""
    from ranksight.settings import load_settings

    objects = render(EXTERNAL)
    for kind, name in (("DaemonSet", "rs-ranksight-agent"), ("StatefulSet", "rs-ranksight-aggregator")):
        [container] = objects[(kind, name)]["spec"]["template"]["spec"]["containers"]
        env = {
            k: v for k, v in env_of(container).items() if isinstance(v, str) and k.startswith("RANKSIGHT_")
        }
        with pytest.MonkeyPatch.context() as mp:
            for key, value in env.items():
                mp.setenv(key, value)
            load_settings(None)  # raises ConfigError naming an unknown or invalid key


def test_the_image_repository_is_required_with_a_clear_message() -> None:
    """Issue 47: the chart pointed at ghcr.io/example/ranksight, which does not exist, and nothing said to build one."""
    with pytest.raises(helm.errors.HelmError, match=r"image\.repository is required: build and push"):
        render({}, image=False)
    agent = render({"image": {"tag": "0.1.0-nvidia"}})[("DaemonSet", "rs-ranksight-agent")]
    assert (
        agent["spec"]["template"]["spec"]["containers"][0]["image"]
        == "registry.example/ranksight:0.1.0-nvidia"
    )


def test_the_agent_runs_on_gpu_nodes_and_tolerates_only_their_taints() -> None:
    spec = render({})[("DaemonSet", "rs-ranksight-agent")]["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert [t["matchExpressions"][0]["key"] for t in terms] == ["nvidia.com/gpu.present",
                                                                "feature.node.kubernetes.io/amd-gpu"]  # fmt: skip
    assert spec["tolerations"] and all(t.get("key") for t in spec["tolerations"])  # no tolerate-everything
    anywhere = render({"agent": {"gpuNodeLabels": [], "runtimeClassName": "nvidia"}})
    spec = anywhere[("DaemonSet", "rs-ranksight-agent")]["spec"]["template"]["spec"]
    assert "affinity" not in spec and spec["runtimeClassName"] == "nvidia"
    assert env_of(spec["containers"][0])["NVIDIA_VISIBLE_DEVICES"] == "all"  # NVML without claiming a GPU


def test_the_dockerfile_builds_a_variant_per_gpu_vendor() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "ARG GPU_VENDOR=none" in dockerfile
    extras = {line.split("=")[0].strip() for line in (REPO / "pyproject.toml").read_text().splitlines()
              if line.startswith(("nvidia =", "amd ="))}  # fmt: skip
    assert extras == {"nvidia", "amd"}
