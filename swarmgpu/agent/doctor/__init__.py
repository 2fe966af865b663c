"""`swarmgpu doctor`: is this node set up so that Swarm GPU services get exactly their GPUs?

The GPU-on-containers debugging handbook, made into checks. Each check reads a
:class:`NodeView` (everything taken from the node's files once, under a root directory)
and returns a :class:`Check`: id, status, what was found, why it matters, and the fix.
The checks are pure, so tests point them at fixture trees (``tests/doctor_roots/``).

Never executes anything from the root: the toolkit's version comes from the dpkg
status file, device numbers from ``os.stat`` (or, in a fixture tree, from the
manifest ``dev/.swarmgpu-devices.json``, since committed files cannot be device nodes).
See docs/doctor.md for every check and the fixture conventions.

One module per group of checks: ``view`` (NodeView, Check, paths), ``read`` (the root
into a NodeView), ``resources`` (generic resources), ``engine``, ``devices``,
``sharing``, ``identity``, ``procview``, ``agentsvc``, ``agentanswers``, ``cdi`` (the
checks), ``cdispec`` (what CDI refuses in a spec's version and kind), ``cdifile`` (a
spec file that is no regular file, or that cannot be read, as the runtime's read meets
it), ``enginelinks`` (dockerd's spec dirs given as symlinks, as its start resolves
them), ``infoparts``
(docker info's parts read as dockerd sends them; a check reading one that is not fails,
naming it), ``report`` (run, exit code, text/JSON), ``factsread`` (the fact source read
within a deadline), ``rootpath`` (a path under the root as the node sees it),
``runtimepath`` (where dockerd finds the NVIDIA runtime), ``dockerdkeys`` (the
daemon.json keys dockerd knows, as data).
"""

from __future__ import annotations

from swarmgpu.agent.doctor.agentanswers import check_agent_answers
from swarmgpu.agent.doctor.agentsvc import (
    check_agents_service,
    check_unkeyed,
    check_unread_nodes,
)
from swarmgpu.agent.doctor.cdi import check_cdi_spec
from swarmgpu.agent.doctor.devices import (
    check_cgroup,
    check_dev_char_links,
    check_device_nodes,
    check_device_order,
    check_gpu_facts,
    check_numa,
)
from swarmgpu.agent.doctor.engine import (
    check_daemon_json,
    check_daemon_keys,
    check_default_runtime,
    check_engine,
    check_generic_resources,
    check_grants,
    check_swarm_resource,
    check_toolkit_mode,
    effective_mode,
)
from swarmgpu.agent.doctor.factsread import FACTS_DEADLINE_S, FactsRead, read_facts_within
from swarmgpu.agent.doctor.identity import check_agent_identity
from swarmgpu.agent.doctor.infoparts import READERS, info_part, info_problems, unread_check
from swarmgpu.agent.doctor.procview import check_proc_root
from swarmgpu.agent.doctor.read import (
    dpkg_version,
    parse_proc_devices,
    parse_version,
    read_view,
)
from swarmgpu.agent.doctor.report import (
    CHECKS,
    exit_code,
    render_json,
    render_text,
    run_checks,
    run_doctor,
)
from swarmgpu.agent.doctor.resources import (
    GenericResource,
    env_name,
    norm_bus_id,
    parse_generic_resources,
)
from swarmgpu.agent.doctor.runtimepath import ROOT_PATH, find_runtime
from swarmgpu.agent.doctor.sharing import check_sharing, sharing_mode
from swarmgpu.agent.doctor.view import (
    AS_VOLUME_MOUNTS,
    DAEMON_JSON,
    DEVICE_MANIFEST,
    DPKG_STATUS,
    ENVVAR_UNPRIVILEGED,
    FIXTURE_DOCKER_INFO,
    FIXTURE_FACTS,
    HAMI_LIBS,
    HAMI_LOCK_DIR,
    HAMI_PRELOAD,
    HOST_PRELOAD,
    JIT_CDI_DEFAULT_FROM,
    NODE_CONFIG_HINT,
    SWARM_IN_CDI_FROM,
    SWARMGPU_KIND,
    TOOLKIT_PACKAGES,
    TOOLKIT_TOML,
    AgentAnswer,
    CdiSpec,
    Check,
    DoctorError,
    HamiView,
    NodeView,
    Parsed,
    RuntimeLookup,
    Status,
    SwarmRead,
    Version,
)

__all__ = [
    "AS_VOLUME_MOUNTS",
    "CHECKS",
    "DAEMON_JSON",
    "DEVICE_MANIFEST",
    "DPKG_STATUS",
    "ENVVAR_UNPRIVILEGED",
    "FACTS_DEADLINE_S",
    "FIXTURE_DOCKER_INFO",
    "FIXTURE_FACTS",
    "HAMI_LIBS",
    "HAMI_LOCK_DIR",
    "HAMI_PRELOAD",
    "HOST_PRELOAD",
    "JIT_CDI_DEFAULT_FROM",
    "NODE_CONFIG_HINT",
    "READERS",
    "ROOT_PATH",
    "SWARMGPU_KIND",
    "SWARM_IN_CDI_FROM",
    "TOOLKIT_PACKAGES",
    "TOOLKIT_TOML",
    "AgentAnswer",
    "CdiSpec",
    "Check",
    "DoctorError",
    "FactsRead",
    "GenericResource",
    "HamiView",
    "NodeView",
    "Parsed",
    "RuntimeLookup",
    "Status",
    "SwarmRead",
    "Version",
    "check_agent_answers",
    "check_agent_identity",
    "check_agents_service",
    "check_cdi_spec",
    "check_cgroup",
    "check_daemon_json",
    "check_daemon_keys",
    "check_default_runtime",
    "check_dev_char_links",
    "check_device_nodes",
    "check_device_order",
    "check_engine",
    "check_generic_resources",
    "check_gpu_facts",
    "check_grants",
    "check_numa",
    "check_proc_root",
    "check_sharing",
    "check_swarm_resource",
    "check_toolkit_mode",
    "check_unkeyed",
    "check_unread_nodes",
    "dpkg_version",
    "effective_mode",
    "env_name",
    "exit_code",
    "find_runtime",
    "info_part",
    "info_problems",
    "norm_bus_id",
    "parse_generic_resources",
    "parse_proc_devices",
    "parse_version",
    "read_facts_within",
    "read_view",
    "render_json",
    "render_text",
    "run_checks",
    "run_doctor",
    "sharing_mode",
    "unread_check",
]
