"""A real one-node Kubernetes on this machine, where Pods really run: etcd and kube-apiserver
(tests/e2e/controlplane.py), kube-controller-manager, kube-scheduler, containerd, the kubelet and
kube-proxy, as host processes, the way Kubernetes' own local-up-cluster runs them.

Why not kind: kind starts its node as a `--privileged` container, and these machines cannot grant
one (their capability bounding set lacks CAP_SYS_RESOURCE). A host node needs no privilege the
machine lacks: the kubelet runs as root here, Pods as whatever their securityContext says.
Where kind runs (a laptop), the README's install commands are kind's, and KUBECONFIG pointing at
it runs the e2e tiers against it.

Networking: a bridge of our own (``fga0``, 10.244.0.1/24) made before anything starts; the
CNI bridge plugin puts each Pod on it, kube-proxy (iptables) makes Service IPs work, and the
API server is advertised on the bridge's address, so Pods reach it through the ``kubernetes``
Service. Every address is on this machine: the bridge, the Pods' network namespaces this
harness creates, and the Service IPs that kube-proxy rewrites to them.

Run it by hand:  python -m tests.cluster.node   (prints a KUBECONFIG; Ctrl-C stops and cleans up)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import yaml
from cryptography.hazmat.primitives import serialization

from admission.pki.certs import make_ca, make_client_cert, make_serving_cert
from tests.e2e.controlplane import ADMIN, ROOT, ControlPlane, assets_dir
from tests.polling import wait_for
from tests.processes import Process, free_port

NODE_NAME = "fga-node"
BRIDGE = "fga0"
GATEWAY = "10.244.0.1"
POD_SUBNET = "10.244.0.0/24"
SERVICE_RANGE = "10.96.0.0/16"
# Persistent across runs (images stay imported), and short: a unix socket path has 108 bytes.
STATE = Path("/var/lib/fga-node")
RUN = Path("/run/fga-node")
CNI_BIN = Path("/usr/lib/cni")
PAUSE_IMAGE = "fga-pause:1"
# Debian's packages that the node needs (hack/test.sh installs them).
PACKAGES = {
    "containerd": "containerd",
    "runc": "runc",
    "iptables": "iptables",
    "conntrack": "conntrack",
    "ip": "iproute2",
    "docker": "docker.io",  # Debian's package of the Docker engine
}


def node_binaries() -> Path:
    """The kubelet, kube-proxy, controller-manager, scheduler and pause, built once and cached."""
    if os.environ.get("FGA_NODE_BINARIES"):
        return Path(os.environ["FGA_NODE_BINARIES"])
    out = subprocess.run(
        [str(ROOT / "hack" / "go-binaries.sh"), "node"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return Path(out)


def missing_prerequisites() -> list[str]:
    """What this machine lacks for a host node: root, Debian's packages, the CNI plugins."""
    missing = [] if os.geteuid() == 0 else ["root (the kubelet runs as root)"]
    missing += [
        f"{command} ({package})" for command, package in PACKAGES.items() if not shutil.which(command)
    ]
    if not (CNI_BIN / "bridge").exists():
        missing.append("the CNI plugins (containernetworking-plugins)")
    if not Path("/sys/fs/cgroup/memory").exists() and not Path("/sys/fs/cgroup/cgroup.controllers").exists():
        missing.append("a cgroup hierarchy with the memory controller")
    return missing


def run(*args: str, check: bool = True, input: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=check, capture_output=True, input=input)


class HostCluster(ControlPlane):
    """A control plane and one node on this machine; every process is stopped by its pid."""

    def __init__(self, workdir: Path, assets: Path, node: Path):
        super().__init__(workdir, assets)
        self.node = node
        self.parts: dict[str, Process] = {}

    # -- the API server, reachable from Pods ------------------------------------------
    def apiserver_args(self) -> list[str]:
        args = [
            a
            for a in super().apiserver_args()
            if not a.startswith(
                (
                    "--bind-address",
                    "--advertise-address",
                    "--disable-admission-plugins",
                    "--endpoint-reconciler-type",
                )
            )
        ]
        # Bound on every address so that clients here keep using loopback while Pods come in
        # through the bridge; advertised on the bridge, which is the `kubernetes` Service's endpoint
        # (kept by the default endpoint reconciler: Pods reach the API server through it).
        return [
            *args,
            "--bind-address=0.0.0.0",
            f"--advertise-address={GATEWAY}",
            f"--tls-cert-file={self.workdir / 'apiserver.crt'}",
            f"--tls-private-key-file={self.workdir / 'apiserver.key'}",
            f"--service-cluster-ip-range={SERVICE_RANGE}",
            # `kubectl logs` and `exec`: the kubelet trusts this client, signed by our CA.
            f"--kubelet-client-certificate={self.workdir / 'kubelet-client.crt'}",
            f"--kubelet-client-key={self.workdir / 'kubelet-client.key'}",
            "--kubelet-preferred-address-types=InternalIP",
        ]

    def _write_apiserver_cert(self) -> None:
        """A serving certificate for every name the API server is reached by, and its CA, which
        the controller-manager publishes to Pods (kube-root-ca.crt)."""
        now = datetime.now(UTC)
        ca_key, ca_cert = make_ca(now, "fga-node-ca")
        names = [
            "localhost",
            "127.0.0.1",
            GATEWAY,
            "10.96.0.1",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ]
        (self.workdir / "ca.crt").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
        for name, (key, cert) in {
            "apiserver": make_serving_cert(ca_key, ca_cert, names, now),
            "kubelet-client": make_client_cert(ca_key, ca_cert, "kube-apiserver", now),
        }.items():
            (self.workdir / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
            (self.workdir / f"{name}.key").write_bytes(
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )

    def _write_kubeconfig(self, user) -> None:
        super()._write_kubeconfig(user)
        path = self.kubeconfig(user)
        config = yaml.safe_load(path.read_text())
        config["clusters"][0]["cluster"]["certificate-authority"] = str(self.workdir / "ca.crt")
        path.write_text(yaml.safe_dump(config))

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        clean_node(self.node)
        self._write_apiserver_cert()
        self._write_credentials()
        make_bridge()
        self.start_etcd()
        self.start_apiserver()
        self.start_part(
            "kube-controller-manager",
            [
                f"--kubeconfig={self.kubeconfig(ADMIN)}",
                "--leader-elect=false",
                f"--service-account-private-key-file={self.workdir / 'sa.key'}",
                f"--root-ca-file={self.workdir / 'ca.crt'}",
                "--use-service-account-credentials=true",
                f"--secure-port={free_port()}",
                "--bind-address=127.0.0.1",
                "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller",
                "--concurrent-deployment-syncs=5",
                "--node-monitor-grace-period=40s",
            ],
        )
        self.start_part(
            "kube-scheduler",
            [
                f"--kubeconfig={self.kubeconfig(ADMIN)}",
                "--leader-elect=false",
                f"--secure-port={free_port()}",
                "--bind-address=127.0.0.1",
            ],
        )
        self.start_containerd()
        self.import_image(self.pause_image_archive())
        self.start_kubelet()
        self.start_kube_proxy()
        wait_for(self.node_ready, 120, f"node {NODE_NAME} Ready", interval=0.5)

    def start_part(self, name: str, args: list[str], binary: Path | None = None) -> Process:
        proc = Process([str(binary or self.node / name), *args], self.workdir / f"{name}.log")
        self.parts[name] = proc
        return proc

    def stop(self) -> None:
        for name in ("kube-proxy", "kubelet"):
            if name in self.parts:
                self.parts.pop(name).stop()
        remove_pods()
        for name in list(self.parts):
            self.parts.pop(name).stop()
        super().stop()
        clean_node(self.node)

    # -- containerd -----------------------------------------------------------------------
    @property
    def containerd_socket(self) -> Path:
        return RUN / "containerd.sock"

    def start_containerd(self) -> None:
        (STATE / "cni-conf").mkdir(parents=True, exist_ok=True)
        (STATE / "cni-conf" / "10-fga.conflist").write_text(json.dumps(CNI_CONFIG, indent=2))
        config = self.workdir / "containerd.toml"
        config.write_text(
            CONTAINERD_CONFIG.format(
                root=STATE / "containerd",
                state=RUN / "containerd",
                socket=self.containerd_socket,
                pause=PAUSE_IMAGE,
                cni_bin=CNI_BIN,
                cni_conf=STATE / "cni-conf",
            )
        )
        self.start_part(
            "containerd", ["--config", str(config)], binary=Path(shutil.which("containerd") or "containerd")
        )
        wait_for(
            lambda: (
                run("ctr", "--address", str(self.containerd_socket), "version", check=False).returncode == 0
            ),
            30,
            "containerd",
        )

    def ctr(self, *args: str, input: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess:
        return run(
            "ctr",
            "--address",
            str(self.containerd_socket),
            "--namespace",
            "k8s.io",
            *args,
            input=input,
            check=check,
        )

    def import_image(self, archive: bytes) -> None:
        """An image archive (`docker save`) into the node's image store, as `kind load` does."""
        self.ctr("images", "import", "--no-unpack=false", "-", input=archive)

    def load_docker_image(self, image: str) -> None:
        self.import_image(run("docker", "save", image).stdout)

    def pause_image_archive(self) -> bytes:
        """The Pod sandbox image, made from the pause binary by `docker import`."""
        if run("docker", "image", "inspect", PAUSE_IMAGE, check=False).returncode != 0:
            with tempfile.TemporaryDirectory() as tmp:
                shutil.copy(self.node / "pause", Path(tmp) / "pause")
                tarball = run("tar", "-C", tmp, "-c", "pause").stdout
            run("docker", "import", "--change", 'ENTRYPOINT ["/pause"]', "-", PAUSE_IMAGE, input=tarball)
        return run("docker", "save", PAUSE_IMAGE).stdout

    # -- kubelet and kube-proxy --------------------------------------------------------------
    def start_kubelet(self) -> None:
        config = self.workdir / "kubelet.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubelet.config.k8s.io/v1beta1",
                    "kind": "KubeletConfiguration",
                    "address": GATEWAY,
                    "port": free_port(),
                    "readOnlyPort": 0,
                    "healthzPort": free_port(),
                    "healthzBindAddress": "127.0.0.1",
                    "authentication": {
                        "anonymous": {"enabled": False},
                        "webhook": {"enabled": True},
                        "x509": {"clientCAFile": str(self.workdir / "ca.crt")},
                    },
                    # Only the API server holds a certificate of that CA; whoever holds one may do anything.
                    "authorization": {"mode": "AlwaysAllow"},
                    "cgroupDriver": "cgroupfs",
                    "failCgroupV1": False,
                    "failSwapOn": False,
                    "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
                    "podLogsDir": str(STATE / "pod-logs"),
                    # Nothing here is reserved for the system, and no evictions: a test machine, not a fleet.
                    "enforceNodeAllocatable": ["pods"],
                    "evictionHard": {
                        "memory.available": "100Mi",
                        "nodefs.available": "1%",
                        "imagefs.available": "1%",
                    },
                    "imageGCHighThresholdPercent": 100,
                    "imageGCLowThresholdPercent": 99,
                    "serializeImagePulls": False,
                    "maxPods": 60,
                    "rotateCertificates": False,
                    "serverTLSBootstrap": False,
                    "protectKernelDefaults": False,
                    "makeIPTablesUtilChains": False,
                    "localStorageCapacityIsolation": True,
                }
            )
        )
        self.start_part(
            "kubelet",
            [
                f"--config={config}",
                f"--kubeconfig={self.kubeconfig(ADMIN)}",
                f"--root-dir={STATE / 'kubelet'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={GATEWAY}",
                f"--cert-dir={self.workdir / 'kubelet-pki'}",
                "--v=1",
            ],
        )

    def start_kube_proxy(self) -> None:
        config = self.workdir / "kube-proxy.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
                    "kind": "KubeProxyConfiguration",
                    "mode": "iptables",
                    "clusterCIDR": POD_SUBNET,
                    "hostnameOverride": NODE_NAME,
                    "clientConnection": {"kubeconfig": str(self.kubeconfig(ADMIN))},
                    "bindAddress": "127.0.0.1",
                    "healthzBindAddress": f"127.0.0.1:{free_port()}",
                    "metricsBindAddress": f"127.0.0.1:{free_port()}",
                    # Pods and the API server share one bridge without br_netfilter guarantees: masquerade
                    # Service traffic so replies come back through the rewrite.
                    "iptables": {"masqueradeAll": True},
                    # Leave the machine's conntrack sysctls as they are.
                    "conntrack": {"maxPerCore": 0, "min": 0},
                }
            )
        )
        self.start_part("kube-proxy", [f"--config={config}", "--v=1"])

    def node_ready(self) -> bool:
        for name in ("kubelet", "containerd", "kube-proxy", "kube-controller-manager", "kube-scheduler"):
            if name in self.parts and not self.parts[name].alive():
                raise RuntimeError(f"{name} exited:\n" + self.parts[name].log()[-3000:])
        out = self.kubectl(
            "get",
            "node",
            NODE_NAME,
            "-o",
            "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
            check=False,
        )
        return out.stdout.strip() == "True"


CNI_CONFIG = {
    "cniVersion": "1.0.0",
    "name": "fga",
    "plugins": [
        {
            "type": "bridge",
            "bridge": BRIDGE,
            "isGateway": True,
            "isDefaultGateway": True,
            "ipMasq": False,
            "hairpinMode": True,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": POD_SUBNET, "gateway": GATEWAY}]],
                "dataDir": str(STATE / "cni-ipam"),
            },
        },
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
}

# containerd 1.6 (Debian's): its CRI plugin, runc with cgroupfs (no systemd on these machines),
# and oom_score_adj clamped to containerd's own, since the machine denies lowering it
# (no CAP_SYS_RESOURCE) and a Pod sandbox asks for -998.
CONTAINERD_CONFIG = """version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{socket}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  enable_unprivileged_ports = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni_conf}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
"""


def make_bridge() -> None:
    if run("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        run("ip", "link", "add", BRIDGE, "type", "bridge")
    run("ip", "addr", "replace", f"{GATEWAY}/24", "dev", BRIDGE)
    run("ip", "link", "set", BRIDGE, "up")


def remove_pods() -> None:
    """Every container and sandbox the node's containerd still runs (after the kubelet stopped)."""
    socket = RUN / "containerd.sock"
    if not socket.exists():
        return
    ctr = ("ctr", "--address", str(socket), "--namespace", "k8s.io")
    for task in run(*ctr, "tasks", "list", "-q", check=False).stdout.decode().split():
        run(*ctr, "tasks", "kill", "-s", "SIGKILL", task, check=False)
    for container in run(*ctr, "containers", "list", "-q", check=False).stdout.decode().split():
        run(*ctr, "tasks", "delete", "-f", container, check=False)
        run(*ctr, "containers", "delete", container, check=False)


def kill_leftovers() -> None:
    """Processes a killed run left: its Pods' (in the kubelet's cgroups) and containerd's shims."""
    for procs in Path("/sys/fs/cgroup/pids/kubepods").rglob("cgroup.procs"):
        for pid in procs.read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (proc / "cmdline").read_bytes()
            if b"containerd-shim" in cmdline and str(RUN).encode() in cmdline:
                os.kill(int(proc.name), signal.SIGKILL)


def clean_node(node: Path) -> None:
    """What a node leaves behind on the machine: processes, mounts, network namespaces, iptables
    chains, the bridge, IP reservations. Run before a start (a previous run may have been killed)
    and after a stop."""
    kill_leftovers()
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith((str(STATE), str(RUN)))), key=len, reverse=True):
        run("umount", "-l", mount, check=False)
    for netns in Path("/var/run/netns").glob("cni-*") if Path("/var/run/netns").exists() else []:
        run("ip", "netns", "delete", netns.name, check=False)
    run(str(node / "kube-proxy"), "--cleanup", check=False)
    # The kubelet's own chain (it blocks loopback from elsewhere), left behind when it stops.
    for chain in ("INPUT", "OUTPUT"):
        run("iptables", "-D", chain, "-j", "KUBE-FIREWALL", check=False)
    run("iptables", "-F", "KUBE-FIREWALL", check=False)
    run("iptables", "-X", "KUBE-FIREWALL", check=False)
    if run("ip", "link", "show", BRIDGE, check=False).returncode == 0:
        run("ip", "link", "delete", BRIDGE, check=False)
    for leftover in ("cni-ipam", "kubelet", "pod-logs"):
        shutil.rmtree(STATE / leftover, ignore_errors=True)
    shutil.rmtree(RUN, ignore_errors=True)


def main() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="fga-node-"))
    cluster = HostCluster(workdir, assets_dir(), node_binaries())
    try:
        cluster.start()
        print(f"export KUBECONFIG={cluster.kubeconfig()}   # node {NODE_NAME}; Ctrl-C stops it", flush=True)
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
        sys.exit(0)


if __name__ == "__main__":
    main()
