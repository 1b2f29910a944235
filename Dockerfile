# March node image: `march serve` from wheels built on the host, as a non-root user.
#
#   pip wheel . -w build/wheels          # with the same Python version as the base image
#   docker build -t march .              # or: podman build -t march .
#
# The install never touches the network by default (--no-index): everything comes from
# build/wheels, so the image is reproducible and builds where no index is reachable. To let pip
# fetch what build/wheels lacks (e.g. wheels built with another Python), pass
# --build-arg MARCH_PIP_OPTIONS= . A base image of your own: --build-arg MARCH_BASE_IMAGE=...
# (it needs python3 with the venv module). See docs/deploy.md.
ARG MARCH_BASE_IMAGE=python:3.12-slim

FROM ${MARCH_BASE_IMAGE} AS install
ARG MARCH_PIP_OPTIONS=--no-index
COPY build/wheels/ /tmp/wheels/
RUN python3 -m venv /opt/march \
 && /opt/march/bin/pip install --no-cache-dir --disable-pip-version-check ${MARCH_PIP_OPTIONS} \
        --find-links /tmp/wheels march \
 && /opt/march/bin/march --version

# The final stage copies only the venv: the wheels and pip's leftovers stay behind.
FROM ${MARCH_BASE_IMAGE}
COPY --from=install /opt/march /opt/march
COPY config/march.toml /etc/march/march.toml
# A fixed numeric user, written directly: minimal bases may lack useradd.
RUN echo 'march:x:10001:10001:march:/var/lib/march:/usr/sbin/nologin' >>/etc/passwd \
 && echo 'march:x:10001:' >>/etc/group \
 && mkdir -p /var/lib/march \
 && chown 10001:10001 /var/lib/march
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
