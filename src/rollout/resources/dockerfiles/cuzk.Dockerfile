# The real prover image: cuzk-daemon and cuzk-bench built from a curio checkout
# (github.com/filecoin-project/curio, extern/cuzk), for playbooks/rollout.yaml.
#
# NOT BUILT ON THE MACHINES THAT TEST ROLLOUT: they have no CUDA base image, no crates.io and
# no GPU. The tests only check that this file parses and that the default playbook's
# image_paths are where it installs the executables. Build it on a machine with registry
# and crates.io access (docs/real-fleet.md):
#
#   docker build -f dockerfiles/cuzk.Dockerfile --build-arg CUDA_ARCHS="86 89" \
#       -t rollout/cuzk:v1 ~/curio
#
# Build context: the ROOT of a curio checkout. Only extern/cuzk (the Cargo workspace) and the
# path dependencies its [patch.crates-io] names are copied: extern/bellperson,
# extern/bellpepper-core and extern/supraseal-c2.
#
# Build arguments:
#   CUDA_BASE     the CUDA 12 *devel* image (nvcc, headers, the libcuda stub). It must build
#                 every arch of CUDA_ARCHS: 12.8 or newer for 100 and 120 (RTX 50xx), 12.6
#                 for the rest (the table is in docs/real-fleet.md). rollout picks it from
#                 build.cuda_archs and refuses a base that cannot; by hand, the nvcc check
#                 below fails the build at its first step
#   RUNTIME_BASE  the slim stage the executables are copied into; use the distribution of
#                 CUDA_BASE, so the glibc and libstdc++ the binaries need are the same
#   CUDA_ARCHS    nvcc target architectures, space separated ("75 80 86 89 90"); both
#                 supraseal-c2 (sppark, via NVCC_APPEND_FLAGS) and bellperson's kernels
#                 (ec-gpu-gen, via EC_GPU_CUDA_NVCC_ARGS) are built for them
# The Rust toolchain is the one extern/cuzk/rust-toolchain.toml pins (1.86.0 today).
# supraseal-c2 uses ADX when the BUILD machine has it: the binaries then need ADX on every
# host (rollout's preflight checks the CPU flags).

ARG CUDA_BASE=nvidia/cuda:12.6.3-devel-ubuntu22.04
ARG RUNTIME_BASE=ubuntu:22.04

FROM ${CUDA_BASE} AS build
ARG CUDA_ARCHS="89"
# Every arch asked for is one this nvcc can build: fail here, not after a long cargo build.
RUN archs="$(nvcc --list-gpu-arch)" && for arch in ${CUDA_ARCHS}; do \
      case "$arch" in *[!0-9a-z]*|"") echo "CUDA_ARCHS: bad word $arch" >&2; exit 1;; esac; \
      echo "$archs" | grep -qx "compute_${arch}" || { \
        echo "this CUDA base's nvcc cannot build sm_${arch} (RTX 50xx, sm_120, needs CUDA 12.8+)" >&2; \
        exit 1; }; \
    done
ENV DEBIAN_FRONTEND=noninteractive \
    RUSTUP_HOME=/opt/rustup CARGO_HOME=/opt/cargo PATH=/opt/cargo/bin:${PATH}
# protobuf-compiler: cuzk-proto's build.rs runs tonic-build (prost), which needs protoc.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates curl build-essential pkg-config clang protobuf-compiler libhwloc-dev \
 && rm -rf /var/lib/apt/lists/* \
 && curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --default-toolchain none

COPY extern/cuzk /src/extern/cuzk
COPY extern/bellperson /src/extern/bellperson
COPY extern/bellpepper-core /src/extern/bellpepper-core
COPY extern/supraseal-c2 /src/extern/supraseal-c2
WORKDIR /src/extern/cuzk

# The toolchain named in rust-toolchain.toml, and nothing else.
RUN toolchain="$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)" \
 && test -n "$toolchain" \
 && rustup toolchain install "$toolchain" --profile minimal \
 && cargo --version

RUN gencode="" && for arch in ${CUDA_ARCHS}; do \
      gencode="$gencode -gencode arch=compute_${arch},code=sm_${arch}"; done \
 && export NVCC_APPEND_FLAGS="$gencode" \
           EC_GPU_CUDA_NVCC_ARGS="--fatbin $gencode" \
 && cargo build --release --locked -p cuzk-daemon -p cuzk-bench \
 && install -m 0755 target/release/cuzk-daemon target/release/cuzk-bench /usr/local/bin/

# A missing library fails the build here, not on a host after its old daemon was stopped.
# libcuda.so.1 is the driver's (the host provides it): it resolves against the toolkit stub.
RUN mkdir -p /opt/ldd-stub \
 && ln -s /usr/local/cuda/lib64/stubs/libcuda.so /opt/ldd-stub/libcuda.so.1 \
 && for exe in cuzk-daemon cuzk-bench; do \
      LD_LIBRARY_PATH=/opt/ldd-stub ldd /usr/local/bin/$exe | tee /tmp/ldd-$exe; \
      if grep -q 'not found' /tmp/ldd-$exe; then echo "$exe: missing libraries" >&2; exit 1; fi; \
    done

FROM ${RUNTIME_BASE} AS runtime
COPY --from=build /usr/local/bin/cuzk-daemon /usr/local/bin/cuzk-bench /usr/local/bin/
COPY --from=build /usr/local/cuda/lib64/stubs/libcuda.so /opt/ldd-stub/libcuda.so.1
RUN apt-get update \
 && apt-get install -y --no-install-recommends libhwloc15 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && for exe in cuzk-daemon cuzk-bench; do \
      LD_LIBRARY_PATH=/opt/ldd-stub ldd /usr/local/bin/$exe | tee /tmp/ldd-$exe; \
      if grep -q 'not found' /tmp/ldd-$exe; then echo "$exe: missing libraries" >&2; exit 1; fi; \
    done \
 && rm -rf /opt/ldd-stub /tmp/ldd-*
CMD ["/usr/local/bin/cuzk-daemon", "-c", "/data/zk/cuzk.toml"]
