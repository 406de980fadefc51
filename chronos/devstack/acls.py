"""Kafka ACLs for the checks that refuse chronos a right on a local Apache Kafka (its
authorizer on, everything allowed that no ACL names)."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient

# Defined in private modules; confluent_kafka.admin re-exports them only implicitly, which
# strict mypy (no_implicit_reexport) rejects.
from confluent_kafka.admin._acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
)
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

#: ``server.properties`` of a broker with its authorizer: only what an ACL denies is refused.
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}
#: The principal of a client without credentials, as the checks connect.
ANONYMOUS = "User:ANONYMOUS"


def deny(bootstrap: str, kind: ResourceType, name: str, operation: AclOperation) -> None:
    """Refuse ``operation`` on one resource and allow the rest of it: with an ACL on it, a
    resource is no longer covered by ``allow.everyone.if.no.acl.found``."""
    acls = [
        AclBinding(kind, name, ResourcePatternType.LITERAL, ANONYMOUS, "*", op, permission)
        for op, permission in (
            (AclOperation.ALL, AclPermissionType.ALLOW),
            (operation, AclPermissionType.DENY),  # a DENY wins over any ALLOW
        )
    ]
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answers came
    for future in admin.create_acls(acls).values():
        future.result(30)


def allow_again(bootstrap: str, topic: str, operation: AclOperation) -> bool:
    """Take back what ``deny`` refused on ``topic``; True when there was such a refusal."""
    refused = AclBindingFilter(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        ANONYMOUS,
        "*",
        operation,
        AclPermissionType.DENY,
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return all(f.result(30) for f in admin.delete_acls([refused]).values())
