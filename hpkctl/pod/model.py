"""The typed pod: every field hpkctl reads, with the API server's validation rules.

One model for every way a pod arrives (``hpkctl run``/``render`` from a file, the kubelet from the
API server). Field names are Kubernetes' (camelCase aliases); unknown fields are allowed, as
Kubernetes has hundreds, but every field modelled here is typed and checked. The rules follow
``k8s.io/apimachinery/pkg/util/validation`` and ``k8s.io/kubernetes/pkg/apis/core/validation``;
where hpkctl is stricter (env var names, absolute ``mountPath``, names of referenced objects) the
message says why. :func:`hpkctl.pod.validation.validate_pod` turns errors into messages.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Annotated, Literal

from hpkctl.typed import Field

from hpkctl.pod.handlers import Lifecycle
from hpkctl.pod.probes import Probe

from hpkctl.pod.fieldtypes import (
    IP,
    AbsolutePath,
    ConfigKey,
    EnvName,
    ItemPath,
    K8sModel,
    Label,
    Mode,
    PortName,
    Quantity,
    RelativePath,
    Subdomain,
    Text,
    Word,
    checked,
    rule,
)


# --- metadata ---------------------------------------------------------------------------------------
class ObjectMeta(K8sModel):
    name: Subdomain | None = None
    namespace: Label | None = None
    uid: Text | None = None
    labels: dict[str, Text] | None = None
    annotations: dict[str, Text] | None = None


# --- containers ---------------------------------------------------------------------------------------
class ObjectFieldSelector(K8sModel):
    field_path: Text
    api_version: Text | None = None


class ResourceFieldSelector(K8sModel):
    resource: Text
    container_name: Label | None = None
    divisor: Quantity | None = None


class KeySelector(K8sModel):
    key: ConfigKey
    name: Subdomain | None = None
    optional: bool | None = None


class EnvVarSource(K8sModel):
    field_ref: ObjectFieldSelector | None = None
    resource_field_ref: ResourceFieldSelector | None = None
    config_map_key_ref: KeySelector | None = None
    secret_key_ref: KeySelector | None = None


class EnvVar(K8sModel):
    name: EnvName
    value: Text | None = None
    value_from: EnvVarSource | None = None


class ObjectRef(K8sModel):
    name: Subdomain | None = None
    optional: bool | None = None


class EnvFromSource(K8sModel):
    prefix: Text | None = None
    config_map_ref: ObjectRef | None = None
    secret_ref: ObjectRef | None = None


class ResourceRequirements(K8sModel):
    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None


class VolumeMount(K8sModel):
    name: Label
    mount_path: AbsolutePath
    sub_path: RelativePath | None = None
    sub_path_expr: RelativePath | None = None
    read_only: bool | None = None


class Capabilities(K8sModel):
    add: list[Text] | None = None
    drop: list[Text] | None = None


class SecurityContext(K8sModel):
    run_as_user: Annotated[int, Field(ge=0, le=2**31 - 1)] | None = None
    run_as_group: Annotated[int, Field(ge=0, le=2**31 - 1)] | None = None
    run_as_non_root: bool | None = None
    read_only_root_filesystem: bool | None = None
    privileged: bool | None = None
    capabilities: Capabilities | None = None


class ContainerPort(K8sModel):
    container_port: Annotated[int, Field(ge=1, le=65535)]
    host_port: Annotated[int, Field(ge=0, le=65535)] | None = None
    name: PortName | None = None
    protocol: Literal["TCP", "UDP", "SCTP"] | None = None


def _bindable_path(value: str) -> None:
    if any(ch in value for ch in ":,\n\r"):
        raise rule("must not contain ':', ',' or a line break (Apptainer's --bind cannot express them)")
    if len(value) > 4096:
        raise rule("must be no more than 4096 characters")


#: terminationMessagePath: an absolute path the job binds a host file to.
TerminationMessagePath = Annotated[AbsolutePath, checked(_bindable_path)]


class Container(K8sModel):
    name: Label
    image: Annotated[Text, Field(min_length=1)]
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    command: list[Text] | None = None
    args: list[Text] | None = None
    working_dir: Text | None = None
    env: list[EnvVar] | None = None
    env_from: list[EnvFromSource] | None = None
    resources: ResourceRequirements | None = None
    volume_mounts: list[VolumeMount] | None = None
    security_context: SecurityContext | None = None
    ports: list[ContainerPort] | None = None
    restart_policy: Literal["Always"] | None = None  # init containers only: a sidecar
    lifecycle: Lifecycle | None = None
    startup_probe: Probe | None = None
    liveness_probe: Probe | None = None
    readiness_probe: Probe | None = None
    termination_message_path: TerminationMessagePath | None = None  # default /dev/termination-log
    termination_message_policy: Literal["File", "FallbackToLogsOnError"] | None = None
    stdin: bool | None = None
    stdin_once: bool | None = None
    tty: bool | None = None


# --- volumes --------------------------------------------------------------------------------------------
class KeyToPath(K8sModel):
    key: ConfigKey
    path: ItemPath
    mode: Mode | None = None


class ConfigMapVolume(K8sModel):
    name: Subdomain | None = None
    items: list[KeyToPath] | None = None
    default_mode: Mode | None = None
    optional: bool | None = None


class SecretVolume(K8sModel):
    secret_name: Subdomain | None = None
    items: list[KeyToPath] | None = None
    default_mode: Mode | None = None
    optional: bool | None = None


class DownwardAPIFile(K8sModel):
    path: ItemPath
    field_ref: ObjectFieldSelector | None = None
    resource_field_ref: ResourceFieldSelector | None = None
    mode: Mode | None = None


class DownwardAPIVolume(K8sModel):
    items: list[DownwardAPIFile] | None = None
    default_mode: Mode | None = None


class DownwardAPIProjection(K8sModel):
    items: list[DownwardAPIFile] | None = None


class ServiceAccountTokenProjection(K8sModel):
    path: ItemPath
    expiration_seconds: int | None = None
    audience: Text | None = None


class ConfigMapProjection(K8sModel):
    name: Subdomain | None = None
    items: list[KeyToPath] | None = None
    optional: bool | None = None


class SecretProjection(K8sModel):
    name: Subdomain | None = None
    items: list[KeyToPath] | None = None
    optional: bool | None = None


class VolumeProjection(K8sModel):
    config_map: ConfigMapProjection | None = None
    secret: SecretProjection | None = None
    downward_api: DownwardAPIProjection | None = Field(default=None, alias="downwardAPI")
    service_account_token: ServiceAccountTokenProjection | None = None


class ProjectedVolume(K8sModel):
    sources: list[VolumeProjection] | None = None
    default_mode: Mode | None = None


class EmptyDirVolume(K8sModel):
    medium: Text | None = None
    size_limit: Quantity | None = None


class HostPathVolume(K8sModel):
    path: AbsolutePath
    type: Literal["", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice",
                  "BlockDevice"] | None = None


class PVCVolume(K8sModel):
    claim_name: Subdomain
    read_only: bool | None = None


class Volume(K8sModel):
    name: Label
    empty_dir: EmptyDirVolume | None = None
    host_path: HostPathVolume | None = None
    persistent_volume_claim: PVCVolume | None = None
    config_map: ConfigMapVolume | None = None
    secret: SecretVolume | None = None
    downward_api: DownwardAPIVolume | None = Field(default=None, alias="downwardAPI")
    projected: ProjectedVolume | None = None


# --- the pod -------------------------------------------------------------------------------------------
class PodDNSConfigOption(K8sModel):
    name: Word | None = None
    value: Word | None = None


class PodDNSConfig(K8sModel):
    nameservers: Annotated[list[IP], Field(max_length=3)] | None = None
    searches: Annotated[list[Word], Field(max_length=32)] | None = None
    options: list[PodDNSConfigOption] | None = None


class HostAlias(K8sModel):
    ip: IP
    hostnames: list[Subdomain] | None = None


class LocalObjectReference(K8sModel):
    name: Subdomain | None = None


class PodSecurityContext(K8sModel):
    run_as_user: Annotated[int, Field(ge=0, le=2**31 - 1)] | None = None
    run_as_group: Annotated[int, Field(ge=0, le=2**31 - 1)] | None = None
    run_as_non_root: bool | None = None
    read_only_root_filesystem: bool | None = None  # not in Kubernetes' pod context, but read if given
    privileged: bool | None = None
    capabilities: Capabilities | None = None


class PodSpec(K8sModel):
    containers: Annotated[list[Container], Field(min_length=1)]
    init_containers: list[Container] | None = None
    volumes: list[Volume] | None = None
    restart_policy: Literal["Always", "OnFailure", "Never"] | None = None
    active_deadline_seconds: Annotated[int, Field(ge=1)] | None = None
    termination_grace_period_seconds: Annotated[int, Field(ge=0)] | None = None
    hostname: Label | None = None
    subdomain: Label | None = None
    dns_policy: Literal["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"] | None = None
    dns_config: PodDNSConfig | None = None
    host_aliases: list[HostAlias] | None = None
    image_pull_secrets: list[LocalObjectReference] | None = None
    enable_service_links: bool | None = None
    service_account_name: Subdomain | None = None
    node_name: Subdomain | None = None
    security_context: PodSecurityContext | None = None


class Pod(K8sModel):
    metadata: ObjectMeta
    spec: PodSpec




# --- the objects a pod refers to ------------------------------------------------------------------------
def _base64(value: str) -> None:
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise rule("must be base64 (Secret data and ConfigMap binaryData are base64-encoded)",
                   "encode it (base64 -w0), or put plain text under stringData (Secret) or data (ConfigMap)") from None


Base64 = Annotated[str, checked(_base64)]


class NamedMeta(K8sModel):
    name: Subdomain
    namespace: Label | None = None


class ConfigMapObject(K8sModel):
    metadata: NamedMeta
    data: dict[ConfigKey, str] | None = None
    binary_data: dict[ConfigKey, Base64] | None = None


class SecretObject(K8sModel):
    metadata: NamedMeta
    data: dict[ConfigKey, Base64] | None = None
    string_data: dict[ConfigKey, str] | None = None



def _dns1035_label(value: str) -> None:
    if len(value) > 63 or not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", value):
        raise rule("must be a DNS-1035 label of at most 63 characters: lowercase letters, digits and '-', starting "
                   "with a letter and ending with a letter or digit", "e.g. 'my-service'")


class ServicePort(K8sModel):
    port: Annotated[int, Field(ge=1, le=65535)]
    name: Label | None = None
    protocol: Literal["TCP", "UDP", "SCTP"] | None = None


class ServiceSpec(K8sModel):
    cluster_ip: Text | None = Field(default=None, alias="clusterIP")
    ports: list[ServicePort] | None = None


class ServiceMeta(K8sModel):
    name: Annotated[str, checked(_dns1035_label)]
    namespace: Label | None = None


class ServiceObject(K8sModel):
    """A Service of the manifest: its name and ports become service-link variables."""

    metadata: ServiceMeta
    spec: ServiceSpec | None = None


__all__ = ["ConfigMapObject", "Container", "K8sModel", "Pod", "PodSpec", "Quantity", "SecretObject", "ServiceObject",
           "Volume", "rule"]
