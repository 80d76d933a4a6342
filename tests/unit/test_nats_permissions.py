"""The NATS permission table is the one declaration: the shipped server config and the security doc are made of it."""

from __future__ import annotations

from ranksight.deploy.nats_permissions import (
    SECURITY_DOC,
    SERVER_CONF,
    doc_with_permissions,
    main,
    roles,
    server_conf,
)
from tests.conftest import REPO


def test_the_shipped_server_config_is_the_table() -> None:
    assert SERVER_CONF.read_text() == server_conf(), "run python -m ranksight.deploy.nats_permissions"
    assert main(["--check"]) == 0


def test_the_cluster_config_takes_its_users_and_permissions_from_the_server_config() -> None:
    lines = (REPO / "deploy/nats/nats-cluster.conf").read_text().splitlines()
    text = "\n".join(line.split("#")[0] for line in lines)  # its settings, without the comments
    assert "include ./nats-server.conf" in text
    # its only authorization is the routes' (servers among themselves): no user or permission of its own
    assert text.count("authorization") == 1 and "permissions" not in text and "users" not in text


def test_the_security_doc_lists_every_grant_of_the_table() -> None:
    text = SECURITY_DOC.read_text()
    assert text == doc_with_permissions(text), "run python -m ranksight.deploy.nats_permissions"
    for role in roles():
        for grant in [*role.publish, *role.subscribe, *role.deny_publish]:
            assert f"`{grant.subject}`" in text


def test_no_role_but_the_aggregator_may_create_or_change_a_stream() -> None:
    for role in roles():
        subjects = [g.subject for g in role.publish]
        can_administer = any(s.startswith("$JS.API.>") or ".CREATE." in s or ".UPDATE." in s or ".DELETE." in s
                             for s in subjects)  # fmt: skip
        assert can_administer == (role.name == "AGGREGATOR"), role.name
        # every user receives replies under its own inbox only
        assert [g.subject for g in role.subscribe if g.subject.startswith("_INBOX")] == [role.inbox]
