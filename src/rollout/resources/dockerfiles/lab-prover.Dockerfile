# The lab "prover image": the stand-in cuzk at the paths the real image uses.
# Build context: dockerfiles/. VERSION and FAULT are stamped into both executables.
# FAULT=missing_library builds a cuzk-daemon that is an ELF needing liblabonly.so.1, a
# library that exists only in this image (like a real build's glibc or libcuda): it loads
# here, and on no lab host, so preflight must refuse it before the old daemon is touched.
ARG BASE=rollout-lab/base:latest
FROM ${BASE}
ARG VERSION=dev
ARG FAULT=none
COPY lab-standin/cuzk-daemon lab-standin/cuzk-bench /usr/local/bin/
RUN sed -i -e "s|^BUILD_VERSION = .*|BUILD_VERSION = \"${VERSION}\"|" \
           -e "s|^BUILD_FAULT = .*|BUILD_FAULT = \"${FAULT}\"|" \
        /usr/local/bin/cuzk-daemon /usr/local/bin/cuzk-bench \
 && chmod 0755 /usr/local/bin/cuzk-daemon /usr/local/bin/cuzk-bench \
 && /usr/local/bin/cuzk-daemon --help > /dev/null \
 && /usr/local/bin/cuzk-bench --help > /dev/null
RUN if [ "${FAULT}" = missing_library ]; then \
      sel=$(ldd /bin/ls | awk '/libselinux.so.1/ {print $3}') \
   && cp "$sel" "$(dirname "$sel")/liblabonly.so.1" \
   && python3 -c "d = open('/bin/ls', 'rb').read(); a = b'libselinux.so.1\0'; \
assert d.count(a) == 1; \
open('/usr/local/bin/cuzk-daemon', 'wb').write(d.replace(a, b'liblabonly.so.1\0'))" \
   && ldd /usr/local/bin/cuzk-daemon | grep -q 'liblabonly.so.1 => /' \
   && /usr/local/bin/cuzk-daemon --help > /dev/null; fi
CMD ["/usr/local/bin/cuzk-daemon", "-c", "/data/zk/cuzk.toml"]
