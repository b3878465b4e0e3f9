"""The servers Flux reconciles from, on loopback: Git over smart HTTP (`git http-backend`), a
plain-HTTP Helm chart repository, and an OCI registry (go-containerregistry's, built by
hack/go-binaries.sh) with small clients that publish to them. Content is ConfigMaps only:
there is no kubelet here."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import json
import subprocess
import tarfile
import threading
import urllib.request
from pathlib import Path

import yaml

from tests.polling import wait_for
from tests.processes import Process


def configmap(name: str, namespace: str, data: dict[str, str]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": data,
        }
    )


def tar_gz(files: dict[str, str]) -> bytes:
    """A gzipped tarball of ``files`` (path -> text), with fixed times: same files, same bytes."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for path, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


class Quiet(http.server.ThreadingHTTPServer):
    daemon_threads = True


def serve(handler: type, name: str) -> tuple[Quiet, str]:
    server = Quiet(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, name=name, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def serve_directory(root: Path, name: str) -> tuple[Quiet, str]:
    """The files under ``root`` over plain HTTP (a Helm repository's index and charts)."""
    directory = str(root)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=directory, **kwargs)

        def log_message(self, *args):  # the test log has no use for access lines
            pass

    return serve(Handler, name)


# -- Git -----------------------------------------------------------------------------------------


class GitServer:
    """Bare repositories under ``root``, served read-write over smart HTTP by git http-backend."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        repos = root

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # the test log has no use for access lines
                pass

            def do_GET(self):
                self._cgi()

            def do_POST(self):
                self._cgi()

            def _cgi(self):
                path, _, query = self.path.partition("?")
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if not length and self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    body = self._chunked()
                env = {
                    "GIT_PROJECT_ROOT": str(repos),
                    "GIT_HTTP_EXPORT_ALL": "1",
                    "PATH_INFO": path,
                    "QUERY_STRING": query,
                    "REQUEST_METHOD": self.command,
                    "REMOTE_USER": "flux",
                    "REMOTE_ADDR": "127.0.0.1",
                    "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                    "CONTENT_LENGTH": str(len(body)),
                    "PATH": "/usr/bin:/bin",
                    "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                    "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                }
                out = subprocess.run(
                    ["git", "http-backend"], input=body, env=env, capture_output=True, timeout=60
                )
                head, _, payload = out.stdout.partition(b"\r\n\r\n")
                status, headers = 200, []
                for line in head.decode(errors="replace").split("\r\n"):
                    key, _, value = line.partition(":")
                    if key.lower() == "status":
                        status = int(value.split()[0])
                    elif key:
                        headers.append((key, value.strip()))
                self.send_response(status)
                for key, value in headers:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _chunked(self) -> bytes:
                data = b""
                while True:
                    size = int(self.rfile.readline().strip(), 16)
                    if not size:
                        self.rfile.readline()
                        return data
                    data += self.rfile.read(size)
                    self.rfile.readline()

        self.http, self.url = serve(Handler, "git-http")

    def repository(self, name: str, branch: str = "main") -> GitRepo:
        bare = self.root / f"{name}.git"
        subprocess.run(["git", "init", "-q", "--bare", "-b", branch, str(bare)], check=True)
        # http-backend refuses pushes from an unauthenticated user unless receive-pack is on.
        subprocess.run(["git", "-C", str(bare), "config", "http.receivepack", "true"], check=True)
        return GitRepo(bare, f"{self.url}/{name}.git", branch)

    def stop(self) -> None:
        self.http.shutdown()


class GitRepo:
    """One repository: commit files to its branch, read it back (image automation pushes)."""

    def __init__(self, bare: Path, url: str, branch: str):
        self.bare, self.url, self.branch = bare, url, branch
        self.work = bare.with_suffix(".work")

    def _git(self, *args: str) -> str:
        env_args = [
            "-c",
            "user.name=test",
            "-c",
            "user.email=test@example.invalid",
            "-c",
            "commit.gpgsign=false",
        ]
        return subprocess.run(
            ["git", *env_args, "-C", str(self.work), *args], check=True, capture_output=True, text=True
        ).stdout.strip()

    def commit(self, files: dict[str, str], message: str = "change") -> str:
        """Write ``files`` (path -> text; None removes) on the branch; Flux's revision of the commit."""
        if self.work.exists():
            self._git("pull", "-q", "--rebase", "origin", self.branch)
        else:
            subprocess.run(
                ["git", "clone", "-q", str(self.bare), str(self.work)], check=True, capture_output=True
            )
            self._git("checkout", "-q", "-B", self.branch)
        for path, text in files.items():
            target = self.work / path
            if text is None:
                target.unlink(missing_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        self._git("add", "-A")
        self._git("commit", "-q", "--allow-empty", "-m", message)
        self._git("push", "-q", "origin", f"HEAD:{self.branch}")
        return f"{self.branch}@sha1:{self._git('rev-parse', 'HEAD')}"

    def head(self) -> str:
        sha = subprocess.run(
            ["git", "-C", str(self.bare), "rev-parse", self.branch],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        return f"{self.branch}@sha1:{sha}"

    def show(self, path: str) -> str:
        return subprocess.run(
            ["git", "-C", str(self.bare), "show", f"{self.branch}:{path}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout


# -- Helm charts ----------------------------------------------------------------------------------


def chart_files(name: str, version: str, template: str, values: dict | None = None) -> dict[str, str]:
    """A chart whose one template is ``template`` (a ConfigMap, usually reading .Values)."""
    return {
        f"{name}/Chart.yaml": yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": name,
                "version": version,
                "appVersion": version,
                "type": "application",
            }
        ),
        f"{name}/values.yaml": yaml.safe_dump(values or {}),
        f"{name}/templates/configmap.yaml": template,
    }


CHART_TEMPLATE = """apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-settings
data:
  chartVersion: {{ .Chart.Version | quote }}
  greeting: {{ .Values.greeting | default "hello" | quote }}
  mode: {{ .Values.mode | default "none" | quote }}
"""


class ChartRepository:
    """A plain-HTTP Helm repository: index.yaml and packaged charts in a directory."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.entries: dict[str, list[dict]] = {}
        self._write_index()
        self.http, self.url = serve_directory(root, "helm-repo")

    def publish(self, name: str, version: str, template: str = CHART_TEMPLATE) -> None:
        package = tar_gz(chart_files(name, version, template))
        filename = f"{name}-{version}.tgz"
        (self.root / filename).write_bytes(package)
        self.entries.setdefault(name, []).append(
            {
                "apiVersion": "v2",
                "name": name,
                "version": version,
                "appVersion": version,
                "urls": [filename],
                "digest": hashlib.sha256(package).hexdigest(),
                "created": "2026-01-01T00:00:00Z",
            }
        )
        self._write_index()

    def _write_index(self) -> None:
        index = {"apiVersion": "v1", "entries": self.entries, "generated": "2026-01-01T00:00:00Z"}
        tmp = self.root / "index.yaml.tmp"
        tmp.write_text(yaml.safe_dump(index))
        tmp.replace(self.root / "index.yaml")

    def stop(self) -> None:
        self.http.shutdown()


# -- OCI ------------------------------------------------------------------------------------------

FLUX_CONFIG = "application/vnd.cncf.flux.config.v1+json"
FLUX_CONTENT = "application/vnd.cncf.flux.content.v1.tar+gzip"
HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"
HELM_CHART = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
IMAGE_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


class Registry:
    """go-containerregistry's in-memory registry as a process, with a minimal push client."""

    def __init__(self, binary: Path, log_dir: Path):
        out = log_dir / "registry.out"
        self.proc = Process(
            ["sh", "-c", f'exec "{binary}" --addr 127.0.0.1:0 > "{out}"'], log_dir / "registry.log"
        )
        self.address = wait_for(lambda: out.read_text().strip(), 30, "the registry's address")
        self.url = f"http://{self.address}"

    def _request(self, method: str, path: str, body: bytes = b"", headers: dict | None = None):
        url = path if path.startswith("http") else self.url + path
        request = urllib.request.Request(
            url, data=body if method in ("PUT", "POST") else None, method=method, headers=headers or {}
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()

    def blob(self, repo: str, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        _, headers, _ = self._request("POST", f"/v2/{repo}/blobs/uploads/")
        location = headers["Location"]
        location = location if location.startswith("http") else self.url + location
        sep = "&" if "?" in location else "?"
        self._request(
            "PUT", f"{location}{sep}digest={digest}", data, {"Content-Type": "application/octet-stream"}
        )
        return digest

    def push(
        self,
        repo: str,
        tag: str,
        config: bytes,
        config_type: str,
        layers: list[tuple[bytes, str]],
        annotations: dict | None = None,
    ) -> str:
        """Push a manifest of ``layers`` under ``tag``; its digest."""
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": config_type, "digest": self.blob(repo, config), "size": len(config)},
            "layers": [
                {"mediaType": media, "digest": self.blob(repo, data), "size": len(data)}
                for data, media in layers
            ],
        }
        if annotations:
            manifest["annotations"] = annotations
        body = json.dumps(manifest).encode()
        self._request("PUT", f"/v2/{repo}/manifests/{tag}", body, {"Content-Type": OCI_MANIFEST})
        return "sha256:" + hashlib.sha256(body).hexdigest()

    def push_manifests(self, repo: str, tag: str, files: dict[str, str]) -> str:
        """An OCI artifact as `flux push artifact` makes it, for an OCIRepository."""
        return self.push(
            repo,
            tag,
            b"{}",
            FLUX_CONFIG,
            [(tar_gz(files), FLUX_CONTENT)],
            {"org.opencontainers.image.revision": tag, "org.opencontainers.image.source": "test"},
        )

    def push_chart(self, repo: str, name: str, version: str, template: str = CHART_TEMPLATE) -> str:
        """A Helm chart as `helm push` stores it."""
        files = chart_files(name, version, template)
        config = json.dumps(yaml.safe_load(files[f"{name}/Chart.yaml"])).encode()
        return self.push(f"{repo}/{name}", version, config, HELM_CONFIG, [(tar_gz(files), HELM_CHART)])

    def push_image(self, repo: str, tag: str, marker: str = "") -> str:
        """A minimal image (one layer) tagged ``tag``; ``marker`` makes its digest differ."""
        config = json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": {"Labels": {"marker": marker or tag}},
                "rootfs": {"type": "layers", "diff_ids": []},
            }
        ).encode()
        return self.push(
            repo,
            tag,
            config,
            IMAGE_CONFIG,
            [(tar_gz({"marker": marker or tag}), "application/vnd.oci.image.layer.v1.tar+gzip")],
        )

    def stop(self) -> None:
        self.proc.stop()
