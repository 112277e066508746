#!/usr/bin/env bash
# Packs a relocatable Open MPI runtime (Debian 12's 4.1.4 with PMIx 4.2, from the installed packages
# openmpi-bin, libopenmpi3, openmpi-common and libpmix2) into .carry/openmpi.tar.xz, for a lent GPU
# machine that has no MPI: mpirun/orterun, orted, ompi_info, the MCA components, PMIx and its
# components, the help texts, and every shared library they need outside glibc and libstdc++.
# scripts/device_mpi_env.sh unpacks it there (after device_env.sh) and points Open MPI at it.
# Components for network fabrics (UCX, OFI/libfabric, PSM, PSM2, verbs/openib) and for OpenSHMEM
# and Java are left out: one host needs none of them, and their libraries would cost megabytes.
# The carried tree is capped at 64 MiB, so libraries that .carry/lib.tar.xz (pack_device.sh) already
# holds byte for byte (libmpi, libopen-pal, libhwloc, libevent, ...) are left out and listed in the
# tarball's SHARED_LIBS; device_mpi_env.sh checks that they are there. --standalone keeps them.
# Usage: scripts/pack_openmpi.sh [--standalone] [output.tar.xz]   (default: .carry/openmpi.tar.xz)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
standalone=0
[ "${1:-}" = --standalone ] && { standalone=1; shift; }
out=${1:-$repo/.carry/openmpi.tar.xz}
carried_libs=$repo/.carry/lib.tar.xz
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
sys_lib=/usr/lib/$multiarch
ompi_pkglib=$sys_lib/openmpi/lib/openmpi3     # Debian's pkglibdir (ompi_info --path pkglibdir)
pmix_prefix=$sys_lib/pmix2                    # Debian's PMIx prefix (libdir = $prefix/lib)

for p in openmpi-bin libopenmpi3 openmpi-common libpmix2; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || {
    echo "pack_openmpi: package $p is not installed (apt-get install openmpi-bin libopenmpi3" \
      "openmpi-common libpmix2)" >&2
    exit 1
  }
done
for f in /usr/bin/orterun /usr/bin/orted "$ompi_pkglib" "$pmix_prefix/lib/libpmix.so.2" /usr/share/openmpi; do
  [ -e "$f" ] || { echo "pack_openmpi: $f is missing (is the system install moved away?)" >&2; exit 1; }
done

stage=$(mktemp -d /tmp/pack_openmpi.XXXXXX)
trap 'rm -rf "$stage"' EXIT
chmod 755 "$stage"
mkdir -p "$stage"/{bin,lib/openmpi3,share/openmpi,etc,pmix/lib/pmix,pmix/share/pmix}

# Executables (the Debian names; mpirun/mpiexec are alternatives links to orterun).
cp -p /usr/bin/orterun /usr/bin/orted /usr/bin/ompi_info "$stage/bin/"
ln -s orterun "$stage/bin/mpirun"; ln -s orterun "$stage/bin/mpiexec"

# MCA components, less the fabric, OpenSHMEM and Java ones.
skip='ucx|ofi|psm|openib|verbs|usnic|spml|sshmem|scoll|memheap|atomic|java'
for c in "$ompi_pkglib"/*.so; do
  [[ $(basename "$c") =~ $skip ]] && continue
  cp -p "$c" "$stage/lib/openmpi3/"
done
cp -p "$pmix_prefix"/lib/pmix/*.so "$stage/pmix/lib/pmix/"
cp -p "$pmix_prefix"/share/pmix/*.txt "$stage/pmix/share/pmix/"
# Help texts and the MCA defaults (Debian's: no openib/ofi/ucx); the PMIx params file is left out,
# it names the component path absolutely: device_mpi_env.sh sets it through the environment.
cp -p /usr/share/openmpi/help-*.txt "$stage/share/openmpi/"
cp -p /etc/openmpi/openmpi-mca-params.conf "$stage/etc/"

# Shared libraries: the closure of every executable and component, outside glibc and the C++
# runtime (the target has those), found through the system's own search path.
libpaths=$sys_lib:$sys_lib/openmpi/lib:$pmix_prefix/lib
: >"$stage/need"
for f in "$stage"/bin/orterun "$stage"/bin/orted "$stage"/bin/ompi_info "$stage"/lib/openmpi3/*.so \
  "$stage"/pmix/lib/pmix/*.so "$sys_lib/libmpi.so.40" "$pmix_prefix/lib/libpmix.so.2"; do
  deps=$(LD_LIBRARY_PATH=$libpaths ldd "$f")
  if grep -q 'not found' <<<"$deps"; then
    echo "pack_openmpi: unresolved library in $f:" >&2; grep 'not found' <<<"$deps" >&2; exit 1
  fi
  awk '/=> \//{print $1, $3}' <<<"$deps" >>"$stage/need"
done
echo "libmpi.so.40 $sys_lib/libmpi.so.40" >>"$stage/need"
echo "libpmix.so.2 $pmix_prefix/lib/libpmix.so.2" >>"$stage/need"
sort -u "$stage/need" | while read -r soname path; do
  case "$soname" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libresolv.so*|libutil.so*|ld-linux*) ;;
    libstdc++*|libgcc_s*) ;;
    *) cp -L "$path" "$stage/lib/$soname" ;;
  esac
done
rm "$stage/need"

# Leave out what lib.tar.xz carries already, identical (device_env.sh unpacks it to /tmp/cnnergy_lib).
mkdir "$stage.carried"
trap 'rm -rf "$stage" "$stage.carried"' EXIT
: >"$stage/SHARED_LIBS"
if [ "$standalone" = 0 ] && [ -f "$carried_libs" ]; then
  tar -xJf "$carried_libs" -C "$stage.carried"
  for l in "$stage"/lib/*.so*; do
    n=$(basename "$l")
    if [ -f "$stage.carried/$n" ] && cmp -s "$l" "$stage.carried/$n"; then
      rm "$l"; echo "$n" >>"$stage/SHARED_LIBS"
    fi
  done
fi

# Everything should resolve inside the tree (plus the carried libraries) now, with no system
# Open MPI, PMIx, hwloc or libevent on the search path.
for f in "$stage"/bin/orterun "$stage"/bin/orted "$stage"/bin/ompi_info "$stage"/lib/openmpi3/*.so \
  "$stage"/pmix/lib/pmix/*.so "$stage"/lib/*.so*; do
  LD_LIBRARY_PATH=$stage/lib:$stage.carried ldd "$f" | awk -v s="$stage" '
    /not found/ {print "missing: " $0; bad=1}
    /=> \// && index($3, s) != 1 && $1 ~ /^lib(mpi|open-|mca_|pmix|hwloc|event|munge|nl-)/ {print "outside: " $0; bad=1}
    END {exit bad}' || { echo "pack_openmpi: $f does not resolve inside the tree" >&2; exit 1; }
done

mkdir -p "$(dirname "$out")"
XZ_OPT=-9e tar -cJf "$out.tmp" -C "$stage" --owner=0 --group=0 --sort=name .
mv "$out.tmp" "$out"
echo "pack_openmpi: $out ($(du -h "$out" | cut -f1); unpacked $(du -sh "$stage" | cut -f1)," \
  "$(find "$stage/lib/openmpi3" -name '*.so' | wc -l) MCA components, $(ls "$stage"/lib/*.so* | wc -l) libraries," \
  "$(wc -l <"$stage/SHARED_LIBS") left to lib.tar.xz)"
