# A stand-in for the official Prometheus image (prom/prometheus) where no registry is reachable:
# a prometheus binary (e.g. Debian's, /usr/bin/prometheus) on any base image, at the official
# image's path (/bin/prometheus), so the compose file's `monitoring` profile runs either unchanged.
# Build context: a directory holding the binary (scripts/compose-check makes build/prometheus/).
#   podman build -f docker/prometheus.Dockerfile --build-arg MARCH_BASE_IMAGE=... -t march-prometheus build/prometheus
ARG MARCH_BASE_IMAGE=debian:bookworm-slim
FROM ${MARCH_BASE_IMAGE}
COPY prometheus /bin/prometheus
RUN mkdir -p /prometheus && chown 65534:65534 /prometheus
USER 65534:65534
EXPOSE 9090
ENTRYPOINT ["/bin/prometheus"]
