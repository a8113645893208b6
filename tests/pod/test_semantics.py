"""Unit tests of the translator's Kubernetes semantics and its errors (no Slurm, no containers)."""

from __future__ import annotations

from typing import Any

import pytest

from hpkctl.errors import PodError
from hpkctl.pod import render_pod
from hpkctl.pod.expansion import expand
from hpkctl.pod.flags import merge_options, parse_options, sbatch_directive_word
from hpkctl.pod.images import parse_image
from hpkctl.pod.objects import StaticObjects
from hpkctl.pod.quantity import parse_quantity
from hpkctl.pod.shell import RuntimeRef, static_text
from hpkctl.pod.translate import plan_pod
from hpkctl.pod.volumes import JobDir
from tests.support.pods import load_pod, make_profile, pod_doc
from tests.support.sbatch import parse_sbatch_directive

PROFILE = make_profile()


def _opts(plan) -> dict[str, str | None]:  # type: ignore[no-untyped-def]
    return {o.name: o.value for o in plan.options}


# --- $(VAR) expansion: cases from Kubernetes' expansion_test.go ---------------------------------
@pytest.mark.parametrize("text, expected", [
    ("$(VAR_A)", "A"), ("___$(VAR_B)___", "___B___"), ("$(VAR_A)-$(VAR_A)", "A-A"),
    ("$$(VAR_A)", "$(VAR_A)"), ("$$$(VAR_A)", "$A"), ("$(VAR_DNE)", "$(VAR_DNE)"),
    ("$(VAR_A", "$(VAR_A"), ("$VAR_A", "$VAR_A"), ("$", "$"), ("$$", "$"), ("$()", "$()"),
    ("f000-$$VAR_A", "f000-$VAR_A"), ("$(VAR_A)$(VAR_B)", "AB"), ("\n$(VAR_A)", "\nA"),
])
def test_expansion_matches_kubernetes(text: str, expected: str) -> None:
    env = {"VAR_A": ("A",), "VAR_B": ("B",), "VAR_EMPTY": ()}
    assert static_text(expand(text, env)) == expected


def test_expansion_keeps_runtime_parts() -> None:
    ip = RuntimeRef("HPK_POD_IP")
    assert expand("http://$(IP):80", {"IP": (ip,)}) == ("http://", ip, ":80")


# --- resources ---------------------------------------------------------------------------------
def test_init_and_main_resources_are_max_not_sum() -> None:
    pod, m = load_pod("init-containers.yaml")
    plan = plan_pod(pod, PROFILE, objects=m.objects)
    opts = _opts(plan)
    assert opts["--cpus-per-task"] == "4"  # max(init 4, main 1), not 5
    assert opts["--mem"] == "1024M"  # max(init 1Gi, main 256Mi limit)


def test_main_containers_are_summed_and_limits_bound_memory() -> None:
    pod, m = load_pod("multi-container.yaml")
    opts = _opts(plan_pod(pod, PROFILE, objects=m.objects))
    assert opts["--cpus-per-task"] == "2"  # ceil(1 + 0.25)
    assert opts["--mem"] == "640M"  # limits 512Mi + 128Mi: Slurm enforces --mem like a limit


def test_memory_request_used_when_some_container_has_no_limit() -> None:
    pod = pod_doc({"containers": [
        {"name": "a", "image": "busybox", "resources": {"requests": {"memory": "100Mi"}, "limits": {"memory": "1Gi"}}},
        {"name": "b", "image": "busybox", "resources": {"requests": {"memory": "50Mi"}}}]})
    assert _opts(plan_pod(pod, PROFILE))["--mem"] == "150M"


def test_gpus_become_gres_and_nv_and_deadline_becomes_timer_and_time_limit() -> None:
    pod, m = load_pod("gpu.yaml")
    plan = plan_pod(pod, PROFILE, objects=m.objects)
    opts = _opts(plan)
    assert opts["--gres"] == "gpu:2"
    # the runtime stops the pod at activeDeadlineSeconds (5400 s); Slurm's limit is the backstop after
    # the stop sequence (grace 30 s + margin 10 s) and a minute of Slurm's own slack
    assert plan.active_deadline == 5400 and plan.grace == 30
    assert opts["--time"] == "01:32:00"
    trainer, monitor = plan.containers
    assert "--nv" in trainer.flags and "--nv" not in monitor.flags


def test_the_deadline_backstop_stays_within_the_site_maximum() -> None:
    prof = make_profile(slurm={"max_time": "02:00:00"})
    plan = plan_pod(pod_doc({"activeDeadlineSeconds": 7200, "containers": [{"name": "a", "image": "x"}]}), prof)
    assert (plan.active_deadline, _opts(plan)["--time"]) == (7200, "02:00:00")
    plan = plan_pod(pod_doc({"activeDeadlineSeconds": 10, "terminationGracePeriodSeconds": 5,
                             "containers": [{"name": "a", "image": "x"}]}), prof)
    assert (plan.active_deadline, _opts(plan)["--time"]) == (10, "00:02:00")  # 85 s, whole minutes
    assert plan_pod(pod_doc({"containers": [{"name": "a", "image": "x"}]}), prof).active_deadline == 0


def test_extended_resource_mapping_from_profile() -> None:
    prof = make_profile(gpu={"extended_resources": {"amd.com/gpu": "mi250"}})
    pod = pod_doc({"containers": [{"name": "a", "image": "x", "resources": {"limits": {"amd.com/gpu": "1"}}}]})
    assert _opts(plan_pod(pod, prof))["--gres"] == "mi250:1"
    bad = pod_doc({"containers": [{"name": "a", "image": "x", "resources": {"limits": {"example.com/fpga": 1}}}]})
    with pytest.raises(PodError) as err:
        plan_pod(bad, prof)
    assert err.value.reason == "UnsupportedResource"


def test_deadline_above_site_maximum_is_a_pod_error() -> None:
    prof = make_profile(slurm={"max_time": "02:00:00"})
    pod = pod_doc({"activeDeadlineSeconds": 3 * 3600, "containers": [{"name": "a", "image": "x"}]})
    with pytest.raises(PodError) as err:
        plan_pod(pod, prof)
    assert err.value.reason == "DeadlineExceedsSiteLimit" and "7200" in err.value.hint


@pytest.mark.parametrize("value, expected", [("500m", "0.5"), ("2Gi", str(2 * 2**30)), ("1e3", "1000"),
                                             ("128974848", "128974848"), ("129M", "129000000"), (2, "2")])
def test_quantities(value: str, expected: str) -> None:
    assert parse_quantity(value) == parse_quantity(expected)


def test_bad_quantity_names_the_field() -> None:
    pod = pod_doc({"containers": [{"name": "a", "image": "x", "resources": {"requests": {"cpu": "lots"}}}]})
    with pytest.raises(PodError, match=r"spec.containers\[0\].resources.requests\[cpu\]"):
        plan_pod(pod, PROFILE)


# --- flags annotation ---------------------------------------------------------------------------
def test_flags_are_shell_words_normalised_and_user_wins() -> None:
    user = parse_options("-N 2 --ntasks 4 -p big --comment='a b' --exclusive --mem=2G", source="t")
    assert [(o.name, o.value) for o in user] == [("--nodes", "2"), ("--ntasks", "4"), ("--partition", "big"),
                                                 ("--comment", "a b"), ("--exclusive", None), ("--mem", "2G")]
    gen = parse_options("--partition=debug --time=10 --cpus-per-task=1", source="g")
    merged = merge_options(gen, user)
    assert [(o.name, o.value) for o in merged if o.name == "--partition"] == [("--partition", "big")]


@pytest.mark.parametrize("flags, message", [
    ("--output=/tmp/x", "--output is not allowed"), ("--array=1-3", "--array is not allowed"),
    ("nodes=2", "not an option"), ("--comment='unclosed", "cannot split"), ("-Z 1", "not a short option of sbatch"),
])
def test_bad_flags_are_pod_errors_naming_the_annotation(flags: str, message: str) -> None:
    pod = pod_doc({"containers": [{"name": "a", "image": "x"}]}, annotations={"slurm.hpk.io/flags": flags})
    with pytest.raises(PodError, match=message) as err:
        plan_pod(pod, PROFILE)
    assert err.value.reason == "InvalidSlurmFlags" and "slurm.hpk.io/flags" in str(err.value)


@pytest.mark.parametrize("alias", ["slurm-job.hpk.io/flags", "slurm.hpk.io/flags", "slurm-job.vk.io/flags",
                                   "slurm-job.knoc.io/flags"])
def test_flag_annotation_aliases(alias: str) -> None:
    pod = pod_doc({"containers": [{"name": "a", "image": "x"}]}, annotations={alias: "--qos=high"})
    assert _opts(plan_pod(pod, PROFILE))["--qos"] == "high"


def test_user_mem_per_cpu_replaces_generated_mem() -> None:
    pod = pod_doc({"containers": [{"name": "a", "image": "x", "resources": {"limits": {"memory": "1Gi"}}}]},
                  annotations={"slurm-job.hpk.io/flags": "--mem-per-cpu=500M"})
    opts = _opts(plan_pod(pod, PROFILE))
    assert "--mem" not in opts and opts["--mem-per-cpu"] == "500M"


@pytest.mark.parametrize("value", ["plain", "a b", 'q"uote', "back\\slash", "#hash", "it's", "ünï", ""])
def test_directive_encoding_round_trips_through_sbatchs_parser(value: str) -> None:
    assert parse_sbatch_directive(f"#SBATCH --comment={sbatch_directive_word(value)}") == [f"--comment={value}"]


def test_account_required_is_enforced_for_real_runs_only() -> None:
    prof = make_profile(slurm={"account_required": True})
    pod = pod_doc({"containers": [{"name": "a", "image": "x"}]})
    with pytest.raises(PodError) as err:
        plan_pod(pod, prof)
    assert err.value.reason == "AccountRequired" and "account" in err.value.hint
    assert any("account" in w for w in plan_pod(pod, prof, strict=False).warnings)


# --- env ----------------------------------------------------------------------------------------
def test_env_precedence_and_sources() -> None:
    pod, m = load_pod("env-all.yaml")
    plan = plan_pod(pod, PROFILE, objects=m.objects, services=m.services)
    [c] = plan.containers
    env = dict(c.env_static)
    assert env["REF"] == "hello world/debug/$(UNDEFINED)/$(ESCAPED)"
    assert env["QUOTED"] == "it's \"quoted\" $(not) `expanded`"
    assert env["CRED_TOKEN"] == env["PASSWORD"] == "s3cr3t"
    assert env["CPU_LIMIT"] == "2" and env["MEM_REQ_MI"] == "100"
    assert env["APP"] == "envs" and env["BUILD"] == "42" and env["SA"] == "default"
    assert env["NODE"] == PROFILE.pods.node_name
    assert env["MY_DB_SERVICE_HOST"] == "10.0.0.12" and env["MY_DB_PORT_5432_TCP_PORT"] == "5432"
    assert "bad-key" not in env and "MISSING_OK" not in env
    runtime = dict(c.env_runtime)
    assert runtime["ENDPOINT"] == ("http://", RuntimeRef("HPK_POD_IP"), ":9000")
    assert any("bad-key" in w for w in plan.warnings)


def test_missing_configmap_fails_real_runs_and_warns_in_dry_runs() -> None:
    pod = pod_doc({"containers": [{"name": "a", "image": "x", "env": [
        {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k"}}}]}]})
    with pytest.raises(PodError) as err:
        plan_pod(pod, PROFILE)
    assert err.value.reason == "CreateContainerConfigError" and "spec.containers[0].env[0]" in str(err.value)
    assert any("nope" in w for w in plan_pod(pod, PROFILE, strict=False).warnings)


def test_env_names_apptainer_cannot_take_are_rejected() -> None:
    pod = pod_doc({"containers": [{"name": "a", "image": "x", "env": [{"name": "my.var", "value": "1"}]}]})
    with pytest.raises(PodError, match=r"env\[0\].name"):
        plan_pod(pod, PROFILE)


def test_service_links_off() -> None:
    pod, m = load_pod("env-all.yaml")
    pod["spec"]["enableServiceLinks"] = False
    [c] = plan_pod(pod, PROFILE, objects=m.objects, services=m.services).containers
    assert "MY_DB_SERVICE_HOST" not in dict(c.env_static)


# --- volumes ------------------------------------------------------------------------------------
def test_volume_payloads_modes_and_read_only_mounts() -> None:
    pod, m = load_pod("volumes-all.yaml")
    r = render_pod(pod, PROFILE, objects=m.objects)
    files = r.files
    assert files["volumes/config/conf/app.properties"] == (b"mode=fast\n", 0o400)
    assert files["volumes/secret/password"] == (b"secret-value", 0o440)
    assert files["volumes/info/labels"][0] == b'note="has \\"quotes\\""\ntier="backend"'  # FormatMap trims the last newline
    assert files["volumes/info/mem"][0] == b"1024"
    assert files["volumes/all-in-one/other.txt"][0] == b"x"
    assert files["volumes/all-in-one/ns"][0] == b"default"
    [c] = r.plan.containers
    ro = {b.dest: b.read_only for b in c.binds}
    assert ro["/etc/app"] and ro["/etc/secret"] and ro["/data"] and not ro["/scratch"]
    assert "hpk_hostpath /srv/data Directory data" in r.script
    assert "/hpk-state/pvc/default/results" in r.script
    # emptyDir: medium Memory on the node's tmpfs, one directory per pod; the default medium in the
    # pod directory; sizeLimit in KiB, for the job's watch
    uid = pod["metadata"]["uid"]
    assert {d.volume: d for d in r.plan.volumes.job_dirs} == {
        "shm": JobDir("shm", f"/dev/shm/hpk-{uid}/shm", 64 * 1024, "64Mi"),
        "scratch": JobDir("scratch", f"{r.plan.pod_dir}/volumes/scratch", 500 * 1024, "500Mi"),
        "claim": JobDir("claim", "/hpk-state/pvc/default/results", None),  # a PVC: a directory, unwatched
    }
    src = {b.dest: static_text(b.source) for b in c.binds}
    assert src["/dev/shm"] == f"/dev/shm/hpk-{uid}/shm" and src["/scratch"] == f"{r.plan.pod_dir}/volumes/scratch"


def test_empty_dir_medium_and_size_limit_decide_where_it_lives_and_whether_it_is_watched() -> None:
    pod = pod_doc({"containers": [{"name": "c", "image": "x", "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
                   "volumes": [{"name": "v", "emptyDir": {"medium": "Memory"}}]})
    profile = make_profile(pods={"memory_dir": "/run/ram"})
    [d] = plan_pod(pod, profile).volumes.job_dirs
    assert d == JobDir("v", f"/run/ram/hpk-{pod['metadata']['uid']}/v", None)  # the profile's tmpfs; no limit
    pod["spec"]["volumes"][0]["emptyDir"] = {}
    plan = plan_pod(pod, profile)
    assert plan.volumes.job_dirs == [JobDir("v", f"{plan.pod_dir}/volumes/v", None)]


@pytest.mark.parametrize("volume, reason", [
    ({"name": "v", "nfs": {"server": "x", "path": "/"}}, "UnsupportedVolume"),
    ({"name": "v", "hostPath": {"path": "relative"}}, "InvalidVolume"),
    ({"name": "v", "hostPath": {"path": "/a:b"}}, "InvalidMountPath"),
    ({"name": "v", "hostPath": {"path": "/x", "type": "Dir"}}, "InvalidVolume"),
    ({"name": "v", "configMap": {"name": "c", "items": [{"key": "k", "path": "../escape"}]}}, "InvalidVolume"),
])
def test_bad_volumes_are_pod_errors(volume: dict, reason: str) -> None:
    pod = pod_doc({"containers": [{"name": "a", "image": "x", "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
                   "volumes": [volume]})
    objects = StaticObjects.of([{"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}])
    with pytest.raises(PodError) as err:
        plan_pod(pod, PROFILE, objects=objects)
    assert err.value.reason == reason


# --- images, security, restart, network ---------------------------------------------------------
@pytest.mark.parametrize("ref, full", [
    ("busybox", "docker.io/library/busybox:latest"), ("a/nginx:1", "docker.io/a/nginx:1"),
    ("ghcr.io/x/y:2", "ghcr.io/x/y:2"), ("localhost:5000/app", "localhost:5000/app:latest"),
    ("busybox@sha256:" + "a" * 64, "docker.io/library/busybox@sha256:" + "a" * 64),
])
def test_image_references(ref: str, full: str) -> None:
    assert parse_image(ref).full == full


def test_image_cache_names_never_collide() -> None:
    assert parse_image("a/nginx:1").cache_name != parse_image("b/nginx:1").cache_name


def test_security_context_mapping() -> None:
    pod, m = load_pod("security-dns.yaml")
    plan = plan_pod(pod, PROFILE, objects=m.objects)
    app, rooty = plan.containers
    assert "--writable-tmpfs" not in app.flags  # readOnlyRootFilesystem
    assert app.flags[app.flags.index("--security") + 1] == "uid:1000,gid:3000"
    assert "--fakeroot" in rooty.flags and "--security" not in rooty.flags
    assert plan.fqdn == "db-0.db.default.svc.cluster.local"
    assert plan.dns_mode == "custom"
    assert plan.resolv_conf == ("nameserver 10.96.0.10\nsearch ns1.svc.cluster.local my.dns.search.suffix\n"
                                "options ndots:2 edns0\n")


@pytest.mark.parametrize("spec, mode, nameserver", [
    ({}, "cluster", "10.0.0.5"),
    ({"hostNetwork": True}, "host", ""),  # ClusterFirst on the host network is the node's resolver
    ({"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}, "cluster", "10.0.0.5"),
    ({"dnsPolicy": "Default"}, "host", ""),
])
def test_cluster_dns_follows_the_dns_policy(spec: dict[str, Any], mode: str, nameserver: str) -> None:
    prof = make_profile(pods={"dns_server": "10.0.0.5"})
    plan = plan_pod(pod_doc({**spec, "containers": [{"name": "a", "image": "x"}]}), prof)
    assert plan.dns_mode == mode
    if nameserver:
        assert plan.resolv_conf == (f"nameserver {nameserver}\nsearch default.svc.cluster.local svc.cluster.local "
                                    "cluster.local\noptions ndots:5\n")


def test_restart_policy_for_init_containers_of_always_pods() -> None:
    pod = pod_doc({"restartPolicy": "Always", "initContainers": [{"name": "i", "image": "x"}],
                   "containers": [{"name": "a", "image": "x"}]})
    init, main = plan_pod(pod, PROFILE).containers
    assert (init.restart_policy, main.restart_policy) == ("OnFailure", "Always")


def test_command_means_exec_and_no_command_means_run() -> None:
    pod = pod_doc({"containers": [{"name": "a", "image": "x", "args": ["--flag"]},
                                  {"name": "b", "image": "x", "command": ["/bin/b"]}]})
    a, b = plan_pod(pod, PROFILE).containers
    assert (a.verb, b.verb) == ("run", "exec")


def test_network_modes_are_stated_in_the_script() -> None:
    pod = pod_doc({"containers": [{"name": "a", "image": "x"}]})
    host = render_pod(pod, PROFILE).script
    cni = render_pod(pod, make_profile(apptainer={"network": "cni", "parent_image": "docker://p"})).script
    assert "# Network: host" in host and "--net" not in host
    assert "# Network: cni" in cni and "exec --net --network bridge --fakeroot" in cni


def test_mpi_pods_fall_back_to_host_network() -> None:
    pod, m = load_pod("mpi.yaml")
    prof = make_profile(apptainer={"network": "cni", "parent_image": "docker://p"})
    plan = plan_pod(pod, prof, objects=m.objects)
    assert plan.network == "host" and plan.containers[0].mpi
    assert any("MPI" in w for w in plan.warnings)


def test_pod_shaped_by_a_real_api_server_renders_without_a_control_plane() -> None:
    pod, m = load_pod("api-server-shape.yaml")
    r = render_pod(pod, PROFILE, objects=m.objects)  # strict: a real run
    sa = "volumes/kube-api-access-7xk2p"
    assert r.files[f"{sa}/namespace"] == (b"default", 0o644)
    assert r.files[f"{sa}/token"][0] == b"" and r.files[f"{sa}/ca.crt"][0] == b""
    assert any("kube-root-ca.crt" in w for w in r.warnings) and any("token" in w for w in r.warnings)
    [c] = r.plan.containers
    assert [b.read_only for b in c.binds if b.dest == "/var/run/secrets/kubernetes.io/serviceaccount"] == [True]
    assert c.verb == "run" and c.pull_policy == "IfNotPresent"
