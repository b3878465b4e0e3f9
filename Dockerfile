# gate-admission: the webhook (`serve`, the default), the certificate job (`certs`) and the gate
# controller (`controller`) in one image. tests/cluster builds it with docker (hack/image.sh) and
# runs it as Pods; tests/server/test_dockerfile.py also replays the builder's RUN steps in a
# virtualenv, without Docker, so keep those steps to `python -m venv`, `pip` and `rm -rf` inside
# the venv.

# Pinned by tag; append @sha256:<digest> to pin the exact bytes. Both stages use it: the venv's
# python is a symlink into the base's /usr/local, so the runtime stage must be the same image.
ARG BASE_IMAGE=python:3.13-slim-trixie

FROM ${BASE_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# The venv gets no pip or setuptools of its own: the base image's pip installs into it
# (--python), so /opt/venv holds the lock and the project, nothing else.
RUN python -m venv --without-pip /opt/venv
# Dependencies in their own layer, rebuilt only when the lock changes. The lock
# (hack/lock-requirements.sh) is the whole closure: --no-deps resolves nothing here,
# --require-hashes takes only the files it pinned, and --only-binary takes wheels only,
# so nothing is compiled and the image needs no compiler in any stage.
COPY requirements.lock ./
RUN python -m pip --python /opt/venv/bin/python install --no-cache-dir --require-hashes --no-deps \
      --only-binary=:all: -r requirements.lock \
 && rm -rf /opt/venv/lib/python3.*/site-packages/kubernetes/aio \
      /opt/venv/lib/python3.*/site-packages/aiohttp /opt/venv/lib/python3.*/site-packages/aiohttp-* \
      /opt/venv/lib/python3.*/site-packages/aiohttp_retry /opt/venv/lib/python3.*/site-packages/aiohttp_retry-* \
      /opt/venv/lib/python3.*/site-packages/aiohappyeyeballs /opt/venv/lib/python3.*/site-packages/aiohappyeyeballs-* \
      /opt/venv/lib/python3.*/site-packages/aiosignal /opt/venv/lib/python3.*/site-packages/aiosignal-* \
      /opt/venv/lib/python3.*/site-packages/frozenlist /opt/venv/lib/python3.*/site-packages/frozenlist-* \
      /opt/venv/lib/python3.*/site-packages/multidict /opt/venv/lib/python3.*/site-packages/multidict-* \
      /opt/venv/lib/python3.*/site-packages/yarl /opt/venv/lib/python3.*/site-packages/yarl-* \
      /opt/venv/lib/python3.*/site-packages/propcache /opt/venv/lib/python3.*/site-packages/propcache-*
# kubernetes/aio is the client's asyncio twin (68 MB of generated code, a fifth of the image), and
# aiohttp with what only it needs (14 MB) is there for it alone: nothing here imports either, and
# `import kubernetes` does not (tests/server/test_dockerfile.py starts the server without them).
# The project itself: a wheel built from the source tree (not editable, no sources kept).
COPY pyproject.toml README.md ./
COPY admission ./admission
RUN python -m pip --python /opt/venv/bin/python install --no-cache-dir --no-deps .

FROM ${BASE_IMAGE}
# 65532: a fixed numeric uid (distroless's "nonroot"), so that runAsNonRoot can verify it.
RUN groupadd --system --gid 65532 nonroot \
 && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin nonroot
# The venv only: no pip cache, sources, build tree or build backend from the builder.
COPY --from=builder /opt/venv /opt/venv
# Read-only root filesystem: besides the cert dir (mounted at /certs; only written by
# `serve --generate-certs` and `certs`), the one path written is the temp dir, and `serve`
# fails at start without one: gunicorn's workers each keep a heartbeat file in worker_tmp_dir,
# which defaults to tempfile's dir ($TMPDIR, else /tmp), as do prometheus_client's per-worker
# metric files (PROMETHEUS_MULTIPROC_DIR unless set), and `certs --secret` works in one. So
# mount a writable /tmp: an emptyDir with medium Memory (manifests/server/deployment.yaml does;
# tmpfs, so heartbeats never block on a disk), or `docker run --read-only --tmpfs /tmp`.
# Bytecode was compiled by pip at install, so Python need not write any.
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 GATE_ADMISSION_CERT_DIR=/certs
USER 65532:65532
EXPOSE 9443
# Exec form: gate-admission, the gunicorn master, is PID 1 and gets SIGTERM itself to drain.
ENTRYPOINT ["gate-admission"]
CMD ["serve"]
