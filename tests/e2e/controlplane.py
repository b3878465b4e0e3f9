"""A real Kubernetes control plane for the end-to-end tests: etcd + kube-apiserver on loopback.

Order (ENVTEST.md): an existing cluster when $KUBECONFIG names one (kind), else binaries from
$KUBEBUILDER_ASSETS, else hack/control-plane-binaries.sh builds (from the Go modules) and
caches them. Users come
from a token file: admin (system:masters), alice (a developer), and a user that stands for
Flux's kustomize-controller service account. With an existing cluster the same users are
impersonated by the current context.

Run it by hand:  python -m tests.e2e.controlplane   (prints a KUBECONFIG; Ctrl-C stops it)
"""

from __future__ import annotations

import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from admission.pki.certs import make_ca, make_client_cert
from tests import ROOT
from tests.processes import Process, free_port, wait_for


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...]
    token: str


ADMIN = User("admin", ("system:masters",), "admin-token")
ALICE = User("alice", ("developers",), "alice-token")
FLUX = User(
    "system:serviceaccount:flux-system:kustomize-controller",
    ("system:serviceaccounts", "system:serviceaccounts:flux-system"),
    "flux-token",
)
# Flux's other controllers, for the test doubles (tests/doubles/flux).
SOURCE_CONTROLLER = User(
    "system:serviceaccount:flux-system:source-controller",
    ("system:serviceaccounts", "system:serviceaccounts:flux-system"),
    "source-token",
)
HELM_CONTROLLER = User(
    "system:serviceaccount:flux-system:helm-controller",
    ("system:serviceaccounts", "system:serviceaccounts:flux-system"),
    "helm-token",
)
IMAGE_REFLECTOR = User(
    "system:serviceaccount:flux-system:image-reflector-controller",
    ("system:serviceaccounts", "system:serviceaccounts:flux-system"),
    "image-token",
)
NOTIFICATION_CONTROLLER = User(
    "system:serviceaccount:flux-system:notification-controller",
    ("system:serviceaccounts", "system:serviceaccounts:flux-system"),
    "notify-token",
)
IMAGE_AUTOMATION = User(
    "system:serviceaccount:flux-system:image-automation-controller",
    ("system:serviceaccounts", "system:serviceaccounts:flux-system"),
    "automation-token",
)
GATE_ADMISSION = User(
    "system:serviceaccount:gate-admission-system:gate-admission",
    ("system:serviceaccounts", "system:serviceaccounts:gate-admission-system"),
    "webhook-token",
)
CONTROLLER = User(
    "system:serviceaccount:gate-admission-system:gate-admission-controller",
    ("system:serviceaccounts", "system:serviceaccounts:gate-admission-system"),
    "controller-token",
)
CERTS = User(
    "system:serviceaccount:gate-admission-system:gate-admission-certs",
    ("system:serviceaccounts", "system:serviceaccounts:gate-admission-system"),
    "certs-token",
)
USERS = (
    ADMIN,
    ALICE,
    FLUX,
    SOURCE_CONTROLLER,
    HELM_CONTROLLER,
    IMAGE_REFLECTOR,
    NOTIFICATION_CONTROLLER,
    IMAGE_AUTOMATION,
    GATE_ADMISSION,
    CONTROLLER,
    CERTS,
)
# The real Flux controllers (tests/realflux), each as its own service account.
FLUX_CONTROLLER_USERS = {
    "source-controller": SOURCE_CONTROLLER,
    "kustomize-controller": FLUX,
    "helm-controller": HELM_CONTROLLER,
    "notification-controller": NOTIFICATION_CONTROLLER,
    "image-reflector-controller": IMAGE_REFLECTOR,
    "image-automation-controller": IMAGE_AUTOMATION,
}
# The API server authenticates to our webhooks with a client certificate (its
# AdmissionConfiguration's kubeconfig, docs/operations.md "Who may call the webhook"); a test
# server started with --client-ca-file=plane.webhook_client_ca requires it.
WEBHOOK_KUBECONFIG_USER = "*"  # every webhook host
# Flux objects' status writes are logged with their bodies and results: tests/realflux/test_doubles.py
# compares the writes the real controllers and the doubles make, as admission sees them.
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: RequestResponse
    verbs: [update, patch]
    resources:
      - group: source.toolkit.fluxcd.io
        resources: ["*/status"]
      - group: kustomize.toolkit.fluxcd.io
        resources: ["*/status"]
      - group: helm.toolkit.fluxcd.io
        resources: ["*/status"]
      - group: image.toolkit.fluxcd.io
        resources: ["*/status"]
  - level: Metadata
"""


def assets_dir() -> Path:
    """Where kube-apiserver and etcd are, building them once if needed."""
    out = subprocess.run(
        [str(ROOT / "hack" / "control-plane-binaries.sh")], check=True, capture_output=True, text=True
    ).stdout.strip()
    return Path(out)


def kubectl_binary(assets: Path | None) -> str:
    """The kubectl built with the API server (kubectl supports one minor version of skew), else PATH's."""
    if assets and (assets / "kubectl").exists():
        return str(assets / "kubectl")
    found = shutil.which("kubectl")
    if found:
        return found
    raise RuntimeError("no kubectl next to the API server or on PATH")


class ControlPlane:
    """Our own etcd + kube-apiserver; every process is stopped by its pid."""

    existing = False

    def __init__(self, workdir: Path, assets: Path):
        self.workdir, self.assets = workdir, assets
        self.etcd: Process | None = None
        self.apiserver: Process | None = None
        self.port = free_port()
        self.etcd_port, self.peer_port = free_port(), free_port()
        self.kubectl_path = kubectl_binary(assets)
        self.server = f"https://127.0.0.1:{self.port}"

    # -- lifecycle --------------------------------------------------------------------
    def _write_credentials(self) -> None:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (self.workdir / "sa.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        )
        (self.workdir / "sa.pub").write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        lines = [f'{u.token},{u.name},{u.name},"{",".join(u.groups)}"' for u in USERS]
        (self.workdir / "tokens.csv").write_text("\n".join(lines) + "\n")
        (self.workdir / "audit-policy.yaml").write_text(AUDIT_POLICY)
        for user in USERS:
            self._write_kubeconfig(user)
        self._write_webhook_client()

    @property
    def webhook_client_ca(self) -> Path:
        return self.workdir / "webhook-client-ca.crt"

    def _write_webhook_client(self) -> None:
        now = datetime.now(UTC)
        ca_key, ca_cert = make_ca(now, "e2e-apiserver-client-ca")
        key, cert = make_client_cert(ca_key, ca_cert, "kube-apiserver", now)
        self.webhook_client_ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
        (self.workdir / "webhook-client.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (self.workdir / "webhook-client.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        (self.workdir / "webhook-kubeconfig.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "users": [
                        {
                            "name": WEBHOOK_KUBECONFIG_USER,
                            "user": {
                                "client-certificate": str(self.workdir / "webhook-client.crt"),
                                "client-key": str(self.workdir / "webhook-client.key"),
                            },
                        }
                    ],
                }
            )
        )
        webhook = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "WebhookAdmissionConfiguration",
            "kubeConfigFile": str(self.workdir / "webhook-kubeconfig.yaml"),
        }
        (self.workdir / "admission-config.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "apiserver.config.k8s.io/v1",
                    "kind": "AdmissionConfiguration",
                    "plugins": [
                        {"name": name, "configuration": webhook}
                        for name in ("ValidatingAdmissionWebhook", "MutatingAdmissionWebhook")
                    ],
                }
            )
        )

    def _write_kubeconfig(self, user: User) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "envtest",
            # kube-apiserver writes its self-signed certificate and CA here on first start.
            "clusters": [
                {
                    "name": "envtest",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(self.workdir / "apiserver-certs" / "apiserver.crt"),
                    },
                }
            ],
            "users": [{"name": user.name, "user": {"token": user.token}}],
            "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": user.name}}],
        }
        self.kubeconfig(user).write_text(yaml.safe_dump(config))

    def kubeconfig(self, user: User = ADMIN) -> Path:
        return self.workdir / f"kubeconfig-{user.token.split('-')[0]}"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write_credentials()
        self.start_etcd()
        self.start_apiserver()

    def start_etcd(self) -> None:
        data = self.workdir / "etcd-data"
        self.etcd = Process(
            [
                str(self.assets / "etcd"),
                "--data-dir",
                str(data),
                "--name",
                "envtest",
                "--listen-client-urls",
                f"http://127.0.0.1:{self.etcd_port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{self.etcd_port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{self.peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{self.peer_port}",
                "--initial-cluster",
                f"envtest=http://127.0.0.1:{self.peer_port}",
                "--unsafe-no-fsync",
            ],
            self.workdir / "etcd.log",
        )
        wait_for(lambda: self._get(f"http://127.0.0.1:{self.etcd_port}/health", tls=False), 30, "etcd")

    def start_apiserver(self) -> None:
        self.apiserver = Process(self.apiserver_args(), self.workdir / "kube-apiserver.log")
        wait_for(self.ready, 60, "kube-apiserver /readyz", interval=0.2)

    def apiserver_args(self) -> list[str]:
        return [
            str(self.assets / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
            "--advertise-address=127.0.0.1",
            # Nothing here reaches the API server through the `kubernetes` Service, and from
            # Kubernetes 1.37 its endpoint reconciler refuses a loopback address (the server exits).
            "--endpoint-reconciler-type=none",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--token-auth-file={self.workdir / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={self.workdir / 'sa.pub'}",
            f"--service-account-signing-key-file={self.workdir / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--disable-admission-plugins=ServiceAccount",
            f"--admission-control-config-file={self.workdir / 'admission-config.yaml'}",
            "--allow-privileged=true",
            # Every request, who made it: tests count what our server asks of the API server.
            f"--audit-policy-file={self.workdir / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}",
        ]

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    def stop_apiserver(self) -> None:
        if self.apiserver:
            self.apiserver.stop()

    def restart_apiserver(self) -> None:
        """Stop the API server (etcd keeps the data) and start it again on the same port."""
        self.stop_apiserver()
        self.start_apiserver()

    def ready(self) -> bool:
        if self.apiserver is not None and not self.apiserver.alive():
            raise RuntimeError("kube-apiserver exited:\n" + self.apiserver.log()[-3000:])
        return self._get(f"{self.server}/readyz", tls=True) == b"ok"

    def _get(self, url: str, tls: bool) -> bytes:
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {ADMIN.token}"})
        context = ssl._create_unverified_context() if tls else None
        with urllib.request.urlopen(request, timeout=2, context=context) as resp:
            return resp.read().strip()

    def stop(self) -> None:
        for proc in (self.apiserver, self.etcd):
            if proc is not None:
                proc.stop()

    # -- clients ------------------------------------------------------------------
    def kubectl(
        self,
        *args: str,
        user: User = ADMIN,
        input: str | None = None,
        check: bool = True,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess:
        cmd = [self.kubectl_path, f"--kubeconfig={self.kubeconfig(user)}", *args]
        result = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result


class ExistingCluster(ControlPlane):
    """The cluster $KUBECONFIG points at; the test users are impersonated."""

    existing = True

    def __init__(self, workdir: Path, kubeconfig: Path):
        self.workdir, self.assets, self.source = workdir, None, kubeconfig
        self.kubectl_path = kubectl_binary(None)
        self.apiserver = self.etcd = None

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)

    def stop(self) -> None:
        pass

    def kubeconfig(self, user: User = ADMIN) -> Path:
        return self.source

    def kubectl(self, *args: str, user: User = ADMIN, **kwargs) -> subprocess.CompletedProcess:
        if user is not ADMIN:
            args = (f"--as={user.name}", *[f"--as-group={g}" for g in user.groups], *args)
        return super().kubectl(*args, user=ADMIN, **kwargs)


def control_plane(workdir: Path) -> ControlPlane:
    """The cluster to test against, in the order ENVTEST.md gives."""
    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig and Path(kubeconfig).is_file():
        return ExistingCluster(workdir, Path(kubeconfig))
    return ControlPlane(workdir, assets_dir())


def main() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="envtest-"))
    plane = ControlPlane(workdir, assets_dir())
    plane.start()
    print(
        f"export KUBECONFIG={plane.kubeconfig()}   # kube-apiserver {plane.server}, Ctrl-C stops it",
        flush=True,
    )
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        plane.stop()
        sys.exit(0)


if __name__ == "__main__":
    main()
