# March node image, built from source in two stages: `build` makes March's wheel and installs it
# with its dependencies into a venv; the final stage holds only that venv and runs as a non-root
# user. Nothing from the host but the source: no host Python, no wheels built beforehand.
#
#   docker compose up -d --build                    # or: podman-compose up -d --build
#   docker build -t march .                         # or: podman build -t march .
#
# Build arguments (see docs/deploy.md, "The images"):
#   PYTHON_VERSION    the Python of the default base image, python:<version>-slim (the one place
#                     that names it)
#   MARCH_BASE_IMAGE  a base image of your own instead (it needs python3 with the venv module, of
#                     the version your offline wheels were built for); empty = the default
#   MARCH_OFFLINE=1   install only from docker/wheels (pip --no-index): for machines that reach no
#                     package index. Fill docker/wheels first (docs/deploy.md).
#   MARCH_PIP_OPTIONS more pip options (e.g. --index-url of your own mirror)
#   MARCH_COMPILE=0   do not compile the per-read path (docs/compiled.md): March runs as Python.
#                     By default the build stage installs a C compiler (apt) if it has none and
#                     compiles it with Cython (a build requirement: offline, docker/wheels needs a
#                     Cython wheel); if no compiler can be had, March is built as Python only and
#                     says so at start. The final stage holds the compiled modules, no compiler.
# A package index behind a TLS proxy with a private CA: pass the CA bundle as the build secret
# `pip_ca` (docker build --secret id=pip_ca,src=/path/ca.crt; podman the same). pip uses it only when
# given; without it pip keeps its own default trust. It is mounted for that one RUN, never stored in
# a layer.
ARG PYTHON_VERSION=3.12
ARG MARCH_BASE_IMAGE=
ARG BASE=${MARCH_BASE_IMAGE:-python:${PYTHON_VERSION}-slim}

FROM ${BASE} AS build
ARG MARCH_OFFLINE=
ARG MARCH_PIP_OPTIONS=
ARG MARCH_COMPILE=1
# A C compiler (and Python's headers where the base lacks them) for the per-read path, when none is
# there; failing that, March is built as Python only (setup.py says so, and March at start).
RUN set -eu; \
    if [ "$MARCH_COMPILE" = 1 ] && ! command -v cc >/dev/null 2>&1; then \
        headers=""; \
        python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))' \
            || headers=python3-dev; \
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
              gcc libc6-dev $headers >/dev/null && rm -rf /var/lib/apt/lists/*; } \
            || echo "march: no C compiler could be installed: building Python only"; \
    fi
COPY docker/wheels/ /tmp/wheels/
COPY pyproject.toml setup.py README.md /src/
COPY march/ /src/march/
# --no-build-isolation is not used: pip builds the wheel in an isolated environment with the build
# backend (setuptools) from the index, or from /tmp/wheels offline.
RUN --mount=type=secret,id=pip_ca,required=false \
    set -eu; \
    if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi; \
    offline=""; \
    if [ -n "$MARCH_OFFLINE" ]; then offline="--no-index"; fi; \
    python3 -m venv /opt/march; \
    if [ "$MARCH_COMPILE" != 1 ]; then export MARCH_NO_COMPILE=1; fi; \
    /opt/march/bin/pip install --no-cache-dir --disable-pip-version-check --find-links /tmp/wheels \
        $offline $MARCH_PIP_OPTIONS /src; \
    /opt/march/bin/march --version; \
    cd / && /opt/march/bin/python -c 'from march import build; print("march build:", build.summary(), build.reason)'

# The final stage copies only the venv: the source, the wheels and pip's leftovers stay behind.
FROM ${BASE}
COPY --from=build /opt/march /opt/march
COPY config/march.toml /etc/march/march.toml
# A fixed numeric user, written directly: minimal bases may lack useradd.
# /var/lib/march-secret: where compose mounts the volume the nodes share the forwarding links'
# secret in (a new volume takes this directory's owner: the node's user may write the secret there).
RUN echo 'march:x:10001:10001:march:/var/lib/march:/usr/sbin/nologin' >>/etc/passwd \
 && echo 'march:x:10001:' >>/etc/group \
 && mkdir -p /var/lib/march /var/lib/march-secret \
 && chown 10001:10001 /var/lib/march /var/lib/march-secret \
 && chmod 700 /var/lib/march-secret
USER 10001:10001
WORKDIR /var/lib/march
# Inside a container the node must listen on every interface; its data (single-node mode; in a
# cluster only cluster.json, which cluster it joined) goes to /var/lib/march. The config file's other settings apply; flags and MARCH_* override them.
ENV PATH=/opt/march/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    MARCH_BIND=0.0.0.0 \
    MARCH_DATA_DIR=/var/lib/march
EXPOSE 7379
ENTRYPOINT ["march"]
CMD ["serve", "--config", "/etc/march/march.toml"]
