#!/usr/bin/env bash
# Builds goroce's drop-in libibverbs.so.1 and librdmacm.so.1 into cabi/lib/ (README: "Run
# an existing RDMA program on goroce"):
#   lib/libgoroce.so     the Go half (package roce and the CM behind C-callable verbs), cgo c-shared
#   lib/libibverbs.so.1  the C half programs link against: rdma-core's ABI and symbol versions
#   lib/librdmacm.so.1   librdmacm's, over libibverbs.so.1 and the Go half's CM
# It needs Go, gcc and rdma-core's headers (Debian's libibverbs-dev and librdmacm-dev), which it installs
# with apt when run as root and they are missing.
set -euo pipefail
cd "$(dirname "$0")"

if [ ! -f /usr/include/infiniband/verbs.h ] || [ ! -f /usr/include/rdma/rdma_cma.h ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "cabi/build.sh: installing libibverbs-dev (rdma-core's headers)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends libibverbs-dev librdmacm-dev >/dev/null ||
      { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends libibverbs-dev librdmacm-dev >/dev/null; }
  else
    echo "cabi/build.sh: rdma-core's headers are missing: apt-get install libibverbs-dev librdmacm-dev" >&2
    exit 1
  fi
fi

mkdir -p lib
CGO_ENABLED=1 go build -buildmode=c-shared -trimpath -o lib/libgoroce.so ./engine

CFLAGS="-O2 -g -fPIC -std=gnu11 -Wall -Wextra -Werror -Wno-unused-parameter -Iinclude -Ilib"
# -z defs: every symbol the library uses must resolve at link time, so a missing
# one fails here, not in a program.
gcc $CFLAGS -shared -o lib/libibverbs.so.1 verbs/*.c \
  -Llib -lgoroce -lpthread \
  -Wl,-soname,libibverbs.so.1 -Wl,--version-script=verbs/libibverbs.map \
  -Wl,-rpath,'$ORIGIN' -Wl,-z,defs
ln -sf libibverbs.so.1 lib/libibverbs.so
gcc $CFLAGS -shared -o lib/librdmacm.so.1 rdmacm/*.c \
  -Llib -lgoroce -libverbs -lpthread \
  -Wl,-soname,librdmacm.so.1 -Wl,--version-script=rdmacm/librdmacm.map \
  -Wl,-rpath,'$ORIGIN' -Wl,-z,defs
ln -sf librdmacm.so.1 lib/librdmacm.so

# The C tests, linked against the library just built (they run on any libibverbs).
mkdir -p bin
for t in verbs-errno verbs-fork verbs-events cm-errors; do
  gcc -O2 -std=gnu11 -Wall -Wextra -Werror -o bin/$t ctest/$t.c -Llib -lrdmacm -libverbs
done
echo "cabi/build.sh: built $(cd lib && ls -1 *.so* | tr '\n' ' ')"
