# The lab "prover image": the stand-in cuzk at the paths the real image uses.
# Build context: dockerfiles/. VERSION and FAULT are stamped into both executables.
ARG BASE=rollout-lab/base:latest
FROM ${BASE}
ARG VERSION=dev
ARG FAULT=none
COPY lab-standin/cuzk-daemon lab-standin/cuzk-bench /usr/local/bin/
RUN sed -i -e "s|^BUILD_VERSION = .*|BUILD_VERSION = \"${VERSION}\"|" \
           -e "s|^BUILD_FAULT = .*|BUILD_FAULT = \"${FAULT}\"|" \
        /usr/local/bin/cuzk-daemon /usr/local/bin/cuzk-bench \
 && chmod 0755 /usr/local/bin/cuzk-daemon /usr/local/bin/cuzk-bench \
 && /usr/local/bin/cuzk-daemon --version
CMD ["/usr/local/bin/cuzk-daemon", "-c", "/data/zk/cuzk.toml"]
