"""Acting on findings: ``[aggregator.actions]`` and its policies."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from ranksight.core.config import Section

ActionKind = Literal[
    "slurm_drain", "k8s_cordon", "nvrx_exclusion", "job_signal", "webhook", "command", "none"
]


ActionMode = Literal["dry_run", "approve", "enforce"]


AlertSeverity = Literal["info", "warning", "critical"]


ACTING_SEVERITIES: tuple[AlertSeverity, ...] = ("warning", "critical")


# NVIDIA's Xid catalog resolution classes (docs.nvidia.com/deploy/xid-errors): what the catalog tells an operator to do.
XidResolution = Literal["ignore", "restart_app", "reset_gpu", "reboot", "drain", "investigate"]


class ActionPolicy(Section):
    """One policy: the findings it acts on and the action it takes (``[[aggregator.actions.policies]]``)."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="names the policy in plans, audit and alerts"
    )
    rules: list[str] = Field(
        min_length=1,
        description="alert rules this policy acts on (the aggregator refuses a name it does not know)",
    )
    severities: list[AlertSeverity] = Field(
        default_factory=lambda: list(ACTING_SEVERITIES), description="only alerts of these severities"
    )
    min_confidence: float = Field(
        0.0,
        ge=0,
        le=1,
        description="the alert's evidence.confidence at least this (rules without one count as 1)",
    )
    min_corroboration: int = Field(
        0,
        ge=0,
        description="other signals that must agree: the alert's evidence.corroboration notes plus other rules "
        "firing on the same node",
    )
    for_s: float = Field(0.0, ge=0, description="the alert must have been firing this long")
    clusters: list[str] = Field(default_factory=lambda: ["*"], description="cluster name patterns (fnmatch)")
    nodes: list[str] = Field(default_factory=lambda: ["*"], description="node name patterns (fnmatch)")
    xid_resolutions: list[XidResolution] = Field(
        default_factory=list,
        description="for gpu_xid alerts: only these resolution classes (after aggregator.actions.xid overrides); "
        "empty = any",
    )
    action: ActionKind
    mode: ActionMode | None = Field(None, description="overrides aggregator.actions.mode for this policy")
    resume_on_resolve: bool = Field(
        False, description="undo the action (resume, uncordon) when the incident resolves"
    )
    signal: Literal["checkpoint", "exit"] = Field(
        "checkpoint",
        description="job_signal: ask the job's processes (ranksight.client.on_action) to checkpoint now, or to exit "
        "for a restart without the node",
    )


class SlurmActionSettings(Section):
    scontrol: str = Field("scontrol", description="the scontrol binary (a path, or a name found on PATH)")
    reason_prefix: str = Field(
        "ranksight:",
        min_length=1,
        max_length=40,
        description="starts every drain reason ranksight sets; only nodes drained with it are resumed",
    )


class KubernetesActionSettings(Section):
    api_url: str = Field("https://kubernetes.default.svc", description="the API server")
    token_file: Path | None = Field(
        Path("/var/run/secrets/kubernetes.io/serviceaccount/token"),
        description="bearer token file (the service account's); unset: no Authorization header",
    )
    ca_file: Path | None = Field(
        None, description="CA bundle for the API server's certificate; unset: system CAs"
    )
    taint_key: str = Field(
        "ranksight.io/finding", description="the taint set on a cordoned node (NoSchedule)"
    )


class ExclusionActionSettings(Section):
    directory: Path | None = Field(
        None,
        description="shared directory nvidia-resiliency-ext reads (ft_launcher --ft-scheduler-exclusion-dir): "
        "ranksight writes scheduler_exclusion.<job>.jsonl there",
    )
    valid_s: float = Field(1800.0, gt=0, description="an exclusion is valid this long after it was written")


class WebhookActionSettings(Section):
    url: str | None = Field(None, description="POSTed the finding as JSON")
    secret: SecretStr | None = Field(
        None,
        description="HMAC-SHA256 key: the X-Ranksight-Signature header is sha256=<hex of the body's HMAC>",
    )


class CommandActionSettings(Section):
    argv: list[str] = Field(
        default_factory=list, description="the command and its arguments; gets the finding as JSON on stdin"
    )


class ActionSettings(Section):
    """Acting on findings (``aggregator.actions``, docs/actions.md): policies and their guard rails."""

    mode: ActionMode = Field(
        "dry_run",
        description="dry_run: plan only; approve: wait for 'ranksight action approve'; enforce: act",
    )
    policies: list[ActionPolicy] = Field(default_factory=list)
    max_nodes_per_window: int = Field(
        3, ge=0, description="circuit breaker: nodes acted on per window at most, then it opens"
    )
    max_cluster_fraction: float = Field(
        0.1, ge=0, le=1, description="circuit breaker: share of a cluster's nodes acted on per window at most"
    )
    window_s: float = Field(3600.0, gt=0, description="the circuit breaker's window")
    cooldown_s: float = Field(3600.0, ge=0, description="a node acted on is not acted on again for this long")
    approval_timeout_s: float = Field(
        86400.0, gt=0, description="an action awaiting approval this long expires (is never taken)"
    )
    queue_size: int = Field(
        1000, ge=1, description="actions waiting to run at most; more are refused, counted and logged"
    )
    max_attempts: int = Field(5, ge=1, description="tries of one action before it is reported failed")
    retry_base_s: float = Field(1.0, gt=0, description="first retry delay; doubled each try")
    retry_max_s: float = Field(60.0, gt=0, description="longest retry delay")
    timeout_s: float = Field(30.0, gt=0, description="limit for one try (a command, a request)")
    max_audit_rows: int = Field(1000, ge=1, description="audit rows an action listing returns at most")
    xid: dict[str, XidResolution] = Field(
        default_factory=dict,
        description="per Xid code, a resolution class overriding the catalog's, e.g. {'79' = 'drain'}",
    )
    slurm: SlurmActionSettings = SlurmActionSettings()
    kubernetes: KubernetesActionSettings = KubernetesActionSettings()
    exclusion: ExclusionActionSettings = ExclusionActionSettings()
    webhook: WebhookActionSettings = WebhookActionSettings()
    command: CommandActionSettings = CommandActionSettings()

    @field_validator("xid")
    @classmethod
    def _xid_codes(cls, xid: dict[str, XidResolution]) -> dict[str, XidResolution]:
        bad = sorted(code for code in xid if not code.isdigit())
        if bad:
            raise ValueError(f"Xid codes are numbers: {', '.join(bad)}")
        return xid

    @model_validator(mode="after")
    def _policies_complete(self) -> ActionSettings:
        names = [p.name for p in self.policies]
        if len(names) != len(set(names)):
            raise ValueError("policy names must be unique")
        needs = {"webhook": ("webhook.url", self.webhook.url), "command": ("command.argv", self.command.argv),
                 "nvrx_exclusion": ("exclusion.directory", self.exclusion.directory)}  # fmt: skip
        for policy in self.policies:
            setting, value = needs.get(policy.action, ("", True))
            if not value:
                raise ValueError(
                    f"policy {policy.name!r}: action {policy.action} needs aggregator.actions.{setting}"
                )
        return self
