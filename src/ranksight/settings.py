"""The root of the settings: every component's sections composed (:class:`Settings`), and :func:`load_settings`.

Each component declares its sections beside its code and a view, the part of the settings its process reads
(:class:`~ranksight.agent.settings.AgentView`, :class:`~ranksight.aggregator.settings.AggregatorView`,
:class:`~ranksight.deploy.settings.DeployView`; the query client's :class:`~ranksight.api.settings.ApiView`). The root
inherits them all: a root instance is accepted wherever a view is typed. The commands load it through the dispatcher
(``ranksight.cli`` hands :func:`load_settings` to :func:`ranksight.core.cliutil.settings_from_args`).
"""

from __future__ import annotations

import os
from typing import Any

from ranksight.agent.settings import AgentSettings, AgentView
from ranksight.core.config import load_root
from ranksight.deploy.settings import DeployView


class Settings(DeployView, AgentView):
    """Every setting; :func:`load_settings` reads them from the file, the environment and the flags."""

    # the agent's own section; the aggregator's view declares for the type checker only the part of it it reads
    agent: AgentSettings = AgentSettings()


def load_settings(path: str | os.PathLike[str] | None = None, **overrides: Any) -> Settings:
    """Load the file (if any), apply the environment on top, then explicit ``overrides`` (command-line flags)."""
    return load_root(Settings, path, **overrides)
