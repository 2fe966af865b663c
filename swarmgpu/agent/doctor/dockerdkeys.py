"""The daemon.json keys dockerd accepts, as data, and which of them it reads.

From moby tag docker-v29.7.2 (commit 6a43e3d5afddf4111da0f864bbc7cae5d7e95001), read,
not copied. dockerd refuses to start on a key it does not know ("the following directives
don't match any configuration option", daemon/config/config.go findConfigurationConflicts),
and "knows" means: a name of one of its command-line flags (daemon/command/docker.go,
options.go, config.go, config_unix.go), the name of a list or map option (``labels`` for
``--label``: opts.NamedOption), or a key it skips (skipValidateOptions). An object's keys
count as top-level keys (configValuesSet), except under the keys of FLAT_OPTIONS.

The file's values are read by the json tags of daemon/config/config.go and config_linux.go.
A tag with no flag (default-init, resolv-conf, swarm-raft-heartbeat-tick,
swarm-raft-election-tick, containerd-plugin-namespace) is refused like any unknown key; a
flag with no tag (``label``, ``node-generic-resource``) is accepted and its value ignored.
"""

from __future__ import annotations

# Accepted and read: the keys to write (and to suggest for a near miss).
READ_KEYS = frozenset(
    {
        "allow-direct-routing",
        "authorization-plugins",
        "bip",
        "bip6",
        "bridge",
        "bridge-accept-fwmark",
        "builder",
        "cdi-spec-dirs",
        "cgroup-parent",
        "containerd",
        "containerd-namespace",
        "cpu-rt-period",
        "cpu-rt-runtime",
        "cri-containerd",
        "data-root",
        "debug",
        "default-address-pools",
        "default-cgroupns-mode",
        "default-gateway",
        "default-gateway-v6",
        "default-ipc-mode",
        "default-network-opts",
        "default-runtime",
        "default-shm-size",
        "default-stop-timeout",
        "default-ulimits",
        "dns",
        "dns-opts",
        "dns-search",
        "exec-opts",
        "exec-root",
        "experimental",
        "features",
        "firewall-backend",
        "fixed-cidr",
        "fixed-cidr-v6",
        "group",
        "host-gateway-ip",
        "host-gateway-ips",
        "hosts",
        "http-proxy",
        "https-proxy",
        "icc",
        "init",
        "init-path",
        "insecure-registries",
        "ip",
        "ip-forward",
        "ip-forward-no-drop",
        "ip-masq",
        "ip6tables",
        "iptables",
        "ipv6",
        "labels",
        "live-restore",
        "log-driver",
        "log-format",
        "log-level",
        "log-opts",
        "max-concurrent-downloads",
        "max-concurrent-uploads",
        "max-download-attempts",
        "metrics-addr",
        "min-api-version",
        "mtu",
        "network-control-plane-mtu",
        "network-diagnostic-port",
        "no-new-privileges",
        "no-proxy",
        "node-generic-resources",
        "nri-opts",
        "pidfile",
        "raw-logs",
        "registry-mirrors",
        "rootless",
        "runtimes",
        "seccomp-profile",
        "selinux-enabled",
        "shutdown-timeout",
        "storage-driver",
        "storage-opts",
        "swarm-default-advertise-addr",
        "tls",
        "tlscacert",
        "tlscert",
        "tlskey",
        "tlsverify",
        "userland-proxy",
        "userland-proxy-path",
        "userns-remap",
    }
)

# Accepted (a flag's name) but not read from the file -> the key that is (None: none is).
IGNORED_KEYS: dict[str, str | None] = {
    "add-runtime": "runtimes",
    "authorization-plugin": "authorization-plugins",
    "cdi-spec-dir": "cdi-spec-dirs",
    "config-file": None,
    "containerd-plugins-namespace": None,  # its tag, containerd-plugin-namespace, is refused
    "default-address-pool": "default-address-pools",
    "default-network-opt": "default-network-opts",
    "default-ulimit": "default-ulimits",
    "dns-opt": "dns-opts",
    "exec-opt": "exec-opts",
    "feature": "features",
    "help": None,
    "host": "hosts",
    "insecure-registry": "insecure-registries",
    "label": "labels",
    "log-opt": "log-opts",
    "node-generic-resource": "node-generic-resources",
    "registry-mirror": "registry-mirrors",
    "restart": None,
    "storage-opt": "storage-opts",
    "validate": None,
    "version": None,
}

# Deprecated, skipped without a word (skipValidateOptions).
SKIPPED_KEYS = frozenset({"deprecated-key-path", "allow-nondistributable-artifacts"})

# Objects whose keys are their own (runtime names, log options), not top-level keys.
FLAT_OPTIONS = frozenset(
    {
        "cluster-store-opts",
        "default-network-opts",
        "log-opts",
        "runtimes",
        "default-ulimits",
        "features",
        "builder",
        "nri-opts",
    }
)

DOCKERD_VERSION = "docker-v29.7.2"
