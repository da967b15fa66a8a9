#!/bin/sh
# Build UCX from source with verbs and rdmacm, at the version the libucx wheel that ucxx depends on
# ships (its libucp reports it: python -c "import libucx, ..." or ucx_info -v), so that ucxx runs
# over rc_verbs on the UCX version libucxx was built for. Then:
#   AML_UCX_VERBS_LIBDIR=<prefix>/lib python -m tests.support.two_hosts ... (tests/hosts/test_ucx_hosts.py's
#   rc_verbs echo hands it to benchmarks/ucx_bench.load_ucxx as AML_UCX_LIBDIR)
# Usage: benchmarks/build_ucx_verbs.sh GIT_DIR TAG PREFIX
#   GIT_DIR: a clone (bare is fine) of github.com/openucx/ucx; TAG: e.g. v1.21.0; PREFIX: where to
#   install (a path the guests see: not /tmp). Needs libibverbs-dev librdmacm-dev autoconf
#   automake libtool pkg-config.
set -eu
git_dir=$1; tag=$2; prefix=$3
src=$prefix.src
rm -rf "$src"; mkdir -p "$src"
git --git-dir="$git_dir" archive "$tag" | tar -x -C "$src"
cd "$src"
./autogen.sh
./contrib/configure-release --prefix="$prefix" --with-verbs --with-rdmacm \
    --without-java --without-go --without-cuda --without-rocm --without-knem --without-xpmem \
    --disable-doxygen-doc --disable-examples
make -j"${JOBS:-2}"
make install
"$prefix/bin/ucx_info" -v
"$prefix/bin/ucx_info" -d | grep -E 'Transport: (rc_verbs|tcp)' | sort -u
