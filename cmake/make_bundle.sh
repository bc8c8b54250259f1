#!/usr/bin/env bash
# Assembles a relocatable zerotrain bundle: the binary, every non-system shared library it needs
# (the ldd closure, RUNPATH rewritten to $ORIGIN with patchelf) and the Open MPI runtime (mpirun,
# orted, ompi_info, the MCA components, PMIx's components, help files, openmpi-mca-params.conf),
# plus env.sh and wrappers in bin/ that point Open MPI at its relocated files. Copy the directory
# anywhere (another host with the same glibc) and run bin/zerotrain or bin/mpirun.
#
#   make_bundle.sh [--include-cuda] [--extra BINARY]... ZEROTRAIN_BINARY OUT_DIR
#
# --extra adds another executable built with zerotrain (the GPU test binary, a benchmark) the same
# way: libexec/NAME with its libraries in lib/, and a wrapper bin/NAME that sources env.sh.
#
# Not bundled: glibc (libc, libm, libdl, libpthread, librt, ld-linux, ...), libstdc++, libgcc_s
# (the target host's own), the CUDA driver (libcuda, libnvidia-*) and, unless --include-cuda, the
# CUDA toolkit libraries (libcudart, libcublas*, libnccl, libcudnn, ...: found at run time under
# /usr/local/cuda or through LD_LIBRARY_PATH). Open MPI components that need network stacks which
# are not bundled (UCX, libfabric/OFI, verbs, PSM/PSM2) or OpenSHMEM are left out: Open MPI then
# uses its shared-memory (vader) and TCP transports.
# Needs patchelf and ldd; the Open MPI found is the one of `ompi_info` on PATH (override with
# ZT_OMPI_INFO=/path/to/ompi_info). Exits non-zero, naming the library, when one cannot be found.
set -euo pipefail

die() {
  printf 'make_bundle: error: %s\n' "$*" >&2
  exit 1
}
note() { printf 'make_bundle: %s\n' "$*" >&2; }
usage() { echo "usage: make_bundle.sh [--include-cuda] [--extra BINARY]... ZEROTRAIN_BINARY OUT_DIR"; }

include_cuda=0
EXTRAS=()
while [ $# -gt 0 ]; do
  case $1 in
    --include-cuda) include_cuda=1 ;;
    --extra)
      [ $# -ge 2 ] || die "--extra needs a binary"
      [ -f "$2" ] && [ -x "$2" ] || die "--extra $2 is not an executable file"
      EXTRAS+=("$(readlink -f "$2")")
      shift
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    -*) die "unknown option $1" ;;
    *) break ;;
  esac
  shift
done
[ $# -eq 2 ] || {
  usage >&2
  exit 2
}
BIN=$1
OUT=$2

command -v patchelf >/dev/null || die "patchelf not found (Debian package patchelf; ./run.sh deps installs it)"
command -v ldd >/dev/null || die "ldd not found"
if [ ! -f "$BIN" ] || [ ! -x "$BIN" ]; then die "zerotrain binary $BIN is not an executable file"; fi
BIN=$(readlink -f "$BIN")

# A previous bundle (marker file) or an empty directory may be replaced; anything else is refused.
if [ -e "$OUT" ]; then
  [ -d "$OUT" ] || die "$OUT exists and is not a directory"
  if [ -e "$OUT/.zt-bundle" ] || [ -z "$(ls -A "$OUT")" ]; then
    rm -rf "$OUT"
  else
    die "$OUT exists and is not a zerotrain bundle (no .zt-bundle): refusing to replace it"
  fi
fi
mkdir -p "$(dirname "$OUT")"
OUT=$(readlink -f "$OUT")
# Assembled beside OUT and renamed at the end: a failure never leaves a half-made bundle.
STAGE=$(mktemp -d "$OUT.partial.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT

# ---- the Open MPI installation (its own idea of its directories, not a relocated one) ----
OMPI_INFO=${ZT_OMPI_INFO:-$(command -v ompi_info || true)}
[ -n "$OMPI_INFO" ] || die "ompi_info not found (Debian package openmpi-bin): cannot locate Open MPI"
clean_env=(env -u OPAL_PREFIX -u OPAL_EXEC_PREFIX -u OPAL_BINDIR -u OPAL_LIBDIR -u OPAL_PKGLIBDIR
  -u OPAL_DATADIR -u OPAL_DATAROOTDIR -u OPAL_PKGDATADIR -u OPAL_SYSCONFDIR -u OPAL_LIBEXECDIR)
ompi_paths=$("${clean_env[@]}" "$OMPI_INFO" --parsable --path all) ||
  die "$OMPI_INFO --parsable --path all failed"
ompi_path() {
  local v
  v=$(sed -n "s/^path:$1://p" <<<"$ompi_paths" | head -n 1)
  [ -n "$v" ] || die "ompi_info does not report Open MPI's $1"
  printf '%s\n' "$v"
}
OMPI_BINDIR=$(ompi_path bindir)
OMPI_PKGLIBDIR=$(ompi_path pkglibdir)
OMPI_PKGDATADIR=$(ompi_path pkgdatadir)
OMPI_SYSCONFDIR=$(ompi_path sysconfdir)
for exe in orterun orted ompi_info; do
  [ -x "$OMPI_BINDIR/$exe" ] || die "Open MPI's $exe not found in $OMPI_BINDIR (openmpi-bin)"
done
[ -d "$OMPI_PKGLIBDIR" ] || die "Open MPI's component directory $OMPI_PKGLIBDIR not found"

# ---- shared-library classification ----
is_system() {  # glibc, the C++ runtime and the loader: the target host's own
  case $1 in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | \
      librt.so.* | libutil.so.* | libresolv.so.* | libanl.so.* | libnsl.so.* | libmvec.so.* | \
      libBrokenLocale.so.* | libstdc++.so.* | libgcc_s.so.*) return 0 ;;
  esac
  return 1
}
is_cuda_driver() {  # must come from the host's driver install: never bundled
  case $1 in libcuda.so* | libnvidia-*.so* | libnvcuvid.so* | libnvoptix.so*) return 0 ;; esac
  return 1
}
is_cuda_toolkit() {  # /usr/local/cuda on the target host, unless --include-cuda
  case $1 in
    libcudart.so* | libcublas.so* | libcublasLt.so* | libnccl.so* | libcudnn*.so* | libnvrtc*.so* | \
      libnvJitLink.so* | libcufft*.so* | libcurand.so* | libcusolver*.so* | libcusparse.so* | \
      libnvToolsExt.so* | libcupti.so*) return 0 ;;
  esac
  return 1
}
# Components needing one of these are left out (network stacks not bundled, OpenSHMEM).
is_dropped_dep() {
  case $1 in
    libucp.so* | libuct.so* | libucs.so* | libucm.so* | libfabric.so* | libibverbs.so* | \
      librdmacm.so* | libefa.so* | libpsm_infinipath.so* | libpsm2.so* | liboshmem.so* | \
      libmca_common_ucx.so* | libmca_common_ofi.so* | libmca_common_verbs.so*) return 0 ;;
  esac
  return 1
}

# deps FILE: "SONAME<TAB>PATH" per dependency in FILE's closure, PATH "not found" if unresolved.
deps() {
  local out
  out=$(LC_ALL=C ldd "$1" 2>&1) || die "ldd $1 failed: $out"
  awk '$2 == "=>" { if ($3 == "not") print $1 "\tnot found"; else print $1 "\t" $3 }' <<<"$out"
}

declare -A LIB_SRC=() # soname -> path on this machine
EXTRA_DIRS=() # directories of the CUDA toolkit libraries left out (zerotrain's RUNPATH)
add_extra_dir() {
  local d
  for d in "${EXTRA_DIRS[@]}"; do [ "$d" != "$1" ] || return 0; done
  EXTRA_DIRS+=("$1")
}
# collect FILE [DEPS]: adds FILE's non-system closure to LIB_SRC (DEPS: deps FILE's answer, when
# already asked); dies naming a library not found.
collect() {
  local file=$1 soname path
  while IFS=$'\t' read -r soname path; do
    is_system "$soname" && continue
    if is_cuda_driver "$soname"; then
      continue
    fi
    if is_cuda_toolkit "$soname" && [ "$include_cuda" -eq 0 ]; then
      if [ "$path" = "not found" ]; then
        note "warning: CUDA library $soname (needed by $file) not found here; left out anyway"
      else
        add_extra_dir "$(dirname "$path")"
      fi
      continue
    fi
    [ "$path" != "not found" ] || die "library $soname needed by $file not found (ldd)"
    if [ -n "${LIB_SRC[$soname]:-}" ] &&
      [ "$(readlink -f "${LIB_SRC[$soname]}")" != "$(readlink -f "$path")" ]; then
      die "library $soname resolves to both ${LIB_SRC[$soname]} and $path"
    fi
    LIB_SRC[$soname]=$path
  done < <(if [ $# -lt 2 ]; then deps "$file"; elif [ -n "$2" ]; then printf '%s\n' "$2"; fi)
}

# The binary's closure, asked once: its libmpi, its libcudart and collect use it.
bin_deps=$(deps "$BIN")
# The binary's libmpi must be the Open MPI whose runtime is bundled.
libmpi_in() { awk -F'\t' '$1 ~ /^libmpi\.so/ { print $2 }'; } # of a deps answer on stdin
bin_mpi=$(libmpi_in <<<"$bin_deps")
[ -n "$bin_mpi" ] || die "$BIN does not link libmpi"
[ "$bin_mpi" != "not found" ] || die "library libmpi.so needed by $BIN not found (ldd)"
info_mpi=$(deps "$OMPI_BINDIR/ompi_info" | libmpi_in)
[ "$(readlink -f "$bin_mpi")" = "$(readlink -f "$info_mpi")" ] ||
  die "$BIN links $bin_mpi but $OMPI_INFO belongs to the Open MPI of $info_mpi"

# PMIx (Debian: an external libpmix with a few components of its own).
PMIX_COMPDIR="" PMIX_HELPDIR=""
pmix_lib=$(deps "$OMPI_BINDIR/orterun" | awk -F'\t' '$1 ~ /^libpmix\.so/ { print $2 }')
if [ -z "$pmix_lib" ]; then
  for c in "$OMPI_PKGLIBDIR"/mca_pmix_*.so; do
    p=$(deps "$c" | awk -F'\t' '$1 ~ /^libpmix\.so/ { print $2 }')
    if [ -n "$p" ]; then pmix_lib=$p; fi
  done
fi
if [ -n "$pmix_lib" ] && [ "$pmix_lib" != "not found" ]; then
  pmix_real=$(dirname "$(readlink -f "$pmix_lib")")  # Debian: .../pmix2/lib
  if [ -d "$pmix_real/pmix" ]; then PMIX_COMPDIR=$pmix_real/pmix; fi
  if [ -d "$pmix_real/../share/pmix" ]; then PMIX_HELPDIR=$(readlink -f "$pmix_real/../share/pmix"); fi
fi

# ---- layout ----
mkdir -p "$STAGE"/{bin,libexec,lib/openmpi,lib/pmix,share/openmpi,share/pmix,etc}
# MANIFEST: "BUNDLE_PATH <- SOURCE_PATH" per file or directory copied (the test hides the sources
# to simulate a host without them), "# ..." for what was left out.
MANIFEST=$STAGE/MANIFEST
printf '# zerotrain bundle: path in the bundle <- source on the build host\n' >"$MANIFEST"
record() { printf '%s <- %s\n' "$1" "$2" >>"$MANIFEST"; }

# copy_elf SRC DEST RUNPATH (empty: the file is left as it is)
copy_elf() {
  cp -L "$1" "$STAGE/$2"
  chmod u+w,a+r "$STAGE/$2"
  if [ -n "$3" ]; then
    patchelf --set-rpath "$3" "$STAGE/$2" || die "patchelf --set-rpath failed on $2"
  fi
  record "$2" "$(readlink -f "$1")"
}

# Open MPI's MCA components, less those needing what is not bundled.
declare -a COMPONENTS=()
dropped=()
for c in "$OMPI_PKGLIBDIR"/mca_*.so; do
  drop=""
  while IFS=$'\t' read -r soname _; do
    if is_dropped_dep "$soname"; then
      drop=$soname
      break
    fi
  done < <(deps "$c")
  if [ -n "$drop" ]; then
    dropped+=("$(basename "$c" .so) ($drop)")
  else
    COMPONENTS+=("$c")
  fi
done
[ ${#COMPONENTS[@]} -gt 0 ] || die "no Open MPI components in $OMPI_PKGLIBDIR"

# The CUDA libraries zerotrain opens at run time (dlopen), which ldd does not list: cuBLASLt (the
# GEMMs) and CUPTI (--profile-steps, where this toolkit has it), of libcudart's major, looked for
# where the loader would look for the binary: LD_LIBRARY_PATH, its RUNPATH, libcudart's folder,
# /usr/local/cuda/lib64. Bundled with --include-cuda; otherwise their folder joins zerotrain's
# RUNPATH, as those of the libraries ldd lists do.
add_opened_at_run_time() {
  local cudart major lib found d runpath dirs=() entries=()
  cudart=$(awk -F'\t' '$1 ~ /^libcudart\.so\./ { print $1 "\t" $2; exit }' <<<"$bin_deps")
  [ -n "$cudart" ] || return 0 # built without CUDA
  major=${cudart%%$'\t'*} && major=${major#libcudart.so.}
  IFS=: read -ra entries <<<"${LD_LIBRARY_PATH:-}" && dirs+=("${entries[@]}")
  runpath=$(LC_ALL=C readelf -d "$BIN" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]$/\1/p')
  IFS=: read -ra entries <<<"$runpath" && dirs+=("${entries[@]}")
  dirs+=("$(dirname "${cudart#*$'\t'}")" /usr/local/cuda/lib64)
  for lib in "libcublasLt.so.$major" "libcupti.so.$major"; do
    found=""
    for d in "${dirs[@]}"; do
      case $d in '' | *'$'*) continue ;; esac # $ORIGIN: the build's own folders
      if [ -e "$d/$lib" ]; then found=$d/$lib && break; fi
    done
    if [ -z "$found" ]; then
      [ "$lib" != "libcublasLt.so.$major" ] ||
        note "warning: $lib (which zerotrain opens at run time) not found here; left out"
      continue
    fi
    if [ "$include_cuda" -eq 1 ]; then
      LIB_SRC[$lib]=$found
      collect "$found"
    else
      add_extra_dir "$(dirname "$found")"
    fi
  done
}

collect "$BIN" "$bin_deps"
for extra in "${EXTRAS[@]}"; do collect "$extra"; done
add_opened_at_run_time
for exe in orterun orted ompi_info; do collect "$OMPI_BINDIR/$exe"; done
for c in "${COMPONENTS[@]}"; do collect "$c"; done
if [ -n "$PMIX_COMPDIR" ]; then
  for c in "$PMIX_COMPDIR"/*.so; do collect "$c"; done
fi

# Executables in libexec/ (RUNPATH ../lib), libraries in lib/ (RUNPATH $ORIGIN); the CUDA toolkit
# libraries left out are looked for where they were found here, then in /usr/local/cuda/lib64.
# shellcheck disable=SC2016  # $ORIGIN is for the loader, not the shell
zt_runpath='$ORIGIN/../lib'
if [ ${#EXTRA_DIRS[@]} -gt 0 ]; then
  add_extra_dir /usr/local/cuda/lib64
  for d in "${EXTRA_DIRS[@]}"; do zt_runpath+=":$d"; done
fi
copy_elf "$BIN" libexec/zerotrain "$zt_runpath"
for extra in "${EXTRAS[@]}"; do copy_elf "$extra" "libexec/$(basename "$extra")" "$zt_runpath"; done
# shellcheck disable=SC2016
{
  for exe in orterun orted ompi_info; do copy_elf "$OMPI_BINDIR/$exe" "libexec/$exe" '$ORIGIN/../lib'; done
  for soname in "${!LIB_SRC[@]}"; do
    # --include-cuda: NVIDIA's libraries already have RUNPATH $ORIGIN; they are not rewritten.
    if is_cuda_toolkit "$soname"; then rp=""; else rp='$ORIGIN'; fi
    copy_elf "${LIB_SRC[$soname]}" "lib/$soname" "$rp"
  done
  record lib/openmpi "$OMPI_PKGLIBDIR"
  for c in "${COMPONENTS[@]}"; do copy_elf "$c" "lib/openmpi/$(basename "$c")" '$ORIGIN/..'; done
  if [ -n "$PMIX_COMPDIR" ]; then
    record lib/pmix "$PMIX_COMPDIR"
    for c in "$PMIX_COMPDIR"/*.so; do copy_elf "$c" "lib/pmix/$(basename "$c")" '$ORIGIN/..'; done
  fi
}
for c in "${dropped[@]}"; do printf '# left out: Open MPI component %s\n' "$c" >>"$MANIFEST"; done
if [ ${#EXTRA_DIRS[@]} -gt 0 ]; then
  printf '# left out: CUDA toolkit libraries; libexec/zerotrain RUNPATH %s\n' "$zt_runpath" >>"$MANIFEST"
fi

# Help texts (Open MPI prints them on errors), parameter sets and the system parameter files.
cp "$OMPI_PKGDATADIR"/help-*.txt "$STAGE/share/openmpi/"
if [ -d "$OMPI_PKGDATADIR/amca-param-sets" ]; then
  cp -r "$OMPI_PKGDATADIR/amca-param-sets" "$STAGE/share/openmpi/"
fi
record share/openmpi "$OMPI_PKGDATADIR"
if [ -n "$PMIX_HELPDIR" ]; then
  cp "$PMIX_HELPDIR"/help-*.txt "$STAGE/share/pmix/"
  record share/pmix "$PMIX_HELPDIR"
fi
for f in openmpi-mca-params.conf openmpi-default-hostfile; do
  if [ -f "$OMPI_SYSCONFDIR/$f" ]; then
    cp "$OMPI_SYSCONFDIR/$f" "$STAGE/etc/$f"
    record "etc/$f" "$OMPI_SYSCONFDIR/$f"
  fi
done

# env.sh: Open MPI's and PMIx's directories, relative to wherever the bundle now is.
cat >"$STAGE/env.sh" <<'EOF'
# shellcheck shell=bash
# zerotrain bundle environment: source it (`. BUNDLE/env.sh`) to use libexec/ binaries directly;
# the wrappers in bin/ source it themselves. Points the relocated Open MPI (OPAL_*) and PMIx at
# this directory, wherever it was copied to.
ZT_BUNDLE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd -P)
export ZT_BUNDLE
export OPAL_PREFIX=$ZT_BUNDLE OPAL_EXEC_PREFIX=$ZT_BUNDLE
export OPAL_BINDIR=$ZT_BUNDLE/bin OPAL_LIBEXECDIR=$ZT_BUNDLE/libexec
export OPAL_LIBDIR=$ZT_BUNDLE/lib OPAL_PKGLIBDIR=$ZT_BUNDLE/lib/openmpi
export OPAL_DATAROOTDIR=$ZT_BUNDLE/share OPAL_DATADIR=$ZT_BUNDLE/share
export OPAL_PKGDATADIR=$ZT_BUNDLE/share/openmpi OPAL_SYSCONFDIR=$ZT_BUNDLE/etc
# PMIx's components (lib/pmix), help texts and parameter file (none: Debian's names its own paths).
export PMIX_LIBDIR=$ZT_BUNDLE/lib PMIX_PKGLIBDIR=$ZT_BUNDLE/lib/pmix
export PMIX_PKGDATADIR=$ZT_BUNDLE/share/pmix PMIX_SYSCONFDIR=$ZT_BUNDLE/etc
# hwloc's optional plugins (PCI, OpenCL) are not bundled: do not load the host's.
export HWLOC_PLUGINS_PATH=$ZT_BUNDLE/lib/hwloc
EOF

# bin/: wrappers that source env.sh and exec the real binary (argv[0] kept: Open MPI's mpirun
# names itself after it, and an absolute path makes it pass the bundle as --prefix to remote
# orteds).
wrapper() {
  cat >"$STAGE/bin/$1" <<EOF
#!/usr/bin/env bash
# zerotrain bundle: the relocated Open MPI's environment (env.sh), then libexec/$2.
set -euo pipefail
# shellcheck source=../env.sh
. "\$(dirname "\$(readlink -f "\${BASH_SOURCE[0]}")")/../env.sh"
exec -a "\$0" "\$ZT_BUNDLE/libexec/$2" "\$@"
EOF
  chmod 755 "$STAGE/bin/$1"
}
wrapper zerotrain zerotrain
for extra in "${EXTRAS[@]}"; do wrapper "$(basename "$extra")" "$(basename "$extra")"; done
for name in mpirun mpiexec orterun; do wrapper "$name" orterun; done
wrapper orted orted
wrapper ompi_info ompi_info

cat >"$STAGE/README.txt" <<'EOF'
zerotrain relocatable bundle (made by cmake/make_bundle.sh; see docs/gpu.md "Relocatable bundle").

  bin/zerotrain train ...                      one rank, no launcher (MPI singleton)
  bin/mpirun -np 2 bin/zerotrain train ...     Open MPI from this bundle
  bin/ompi_info --path all                     where the bundled Open MPI looks for its files

bin/ holds wrappers: they source env.sh (OPAL_*/PMIx paths relative to this directory) and run
the real binaries in libexec/. lib/ holds every non-system shared library (RUNPATH $ORIGIN),
lib/openmpi/ Open MPI's components, etc/ its parameter file. MANIFEST lists every file's source.
Needs on the host: the same or a newer glibc, libstdc++ and libgcc_s (x86-64 Linux); for the
CUDA backend the NVIDIA driver and the CUDA toolkit libraries (libcudart, libcublasLt, libnccl,
and libcudnn 9 when built with the fused attention) under /usr/local/cuda/lib64 (or on
LD_LIBRARY_PATH; pip's nvidia-cudnn-cu13 wheel has libcudnn).
EOF
touch "$STAGE/.zt-bundle"

# ---- sanity: every bundled ELF resolves its non-system libraries inside the bundle ----
while IFS= read -r -d '' f; do
  while IFS=$'\t' read -r soname path; do
    is_system "$soname" && continue
    is_cuda_driver "$soname" && continue
    if is_cuda_toolkit "$soname" && [ "$include_cuda" -eq 0 ]; then continue; fi
    [ "$path" != "not found" ] || die "bundled ${f#"$STAGE"/} cannot find $soname"
    case $(readlink -f "$path") in
      "$STAGE"/*) ;;
      *) die "bundled ${f#"$STAGE"/} resolves $soname outside the bundle ($path)" ;;
    esac
  done < <(deps "$f")
done < <(find "$STAGE/libexec" "$STAGE/lib" -type f -print0)

rm -rf "$OUT"
mv "$STAGE" "$OUT"
trap - EXIT
size=$(du -sb "$OUT" | cut -f1)
note "bundle $OUT: $(find "$OUT/lib" -maxdepth 1 -name '*.so*' | wc -l) libraries, ${#COMPONENTS[@]} Open MPI components (${#dropped[@]} left out), $(awk -v s="$size" 'BEGIN { printf "%.1f", s / 1048576 }') MiB"
