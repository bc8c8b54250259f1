#!/usr/bin/env bash
# bundle_runs_relocated (label mpi): cmake/make_bundle.sh into a temp dir, the bundle moved to
# another path (relocation), then, with LD_LIBRARY_PATH, OPAL_*, PMIX_* and OMPI_* cleared:
#  (a) ldd: every non-system library of libexec/{zerotrain,orterun,orted}, of a few Open MPI
#      components and of PMIx's components resolves inside the bundle (the system copies exist
#      on this machine, so only that proves the bundle works where they are absent); a copy of
#      zerotrain without its RUNPATH must fail the same check (the check can fail);
#  (b) bin/ompi_info reports the bundle's prefix, component, help and parameter-file directories;
#  (c) bin/zerotrain singleton (no launcher): --version, prepare-data, train 2 steps;
#  (d) bin/mpirun -np 2 bin/zerotrain train 3 steps at ZeRO stage 2;
#      (c) and (d) under LD_DEBUG=libs: every process (mpirun, orted, ranks) loaded the bundle's
#      libmpi and components, and not one file whose bundled copy exists from its system place;
#  (e) where a private mount namespace is allowed (root): every source file of the bundle
#      (MANIFEST) hidden behind /dev/null and Open MPI's/PMIx's system directories behind an
#      empty one, i.e. a host without the Debian packages; singleton and np2 train again.
#   bundle_relocated_test.sh MAKE_BUNDLE ZEROTRAIN_BINARY SOURCE_DIR
# Exit 0 pass, 1 fail, 77 skip (patchelf not installed). ZT_BUNDLE_KEEP=1 keeps the temp dir.
set -euo pipefail

fail() {
  printf '[bundle test] FAIL: %s\n' "$*" >&2
  exit 1
}
note() { printf '[bundle test] %s\n' "$*" >&2; }

SYSTEM_RE='^(linux-vdso|ld-linux.*|libc|libm|libdl|libpthread|librt|libutil|libresolv|libanl|libnsl|libmvec|libstdc\+\+|libgcc_s)\.so'
CUDA_RE='^(libcuda|libcudart|libcublas|libcublasLt|libnccl|libcudnn.*|libnvrtc.*|libnvJitLink|libnvidia-.*)\.so'

# check_inside BUNDLE FILE: prints each non-system, non-CUDA library of FILE that is not found or
# resolves outside BUNDLE; returns 1 if there is one.
check_inside() {
  local bundle=$1 file=$2 out bad=0 soname arrow path _
  out=$(LC_ALL=C ldd "$file" 2>&1) || {
    printf '%s: ldd failed: %s\n' "$file" "$out"
    return 1
  }
  while read -r soname arrow path _; do
    [ "$arrow" = "=>" ] || continue
    [[ $soname =~ $SYSTEM_RE || $soname =~ $CUDA_RE ]] && continue
    if [ "$path" = "not" ]; then
      printf '%s: %s not found\n' "${file#"$bundle"/}" "$soname"
      bad=1
    elif [[ $(readlink -f "$path") != "$bundle"/* ]]; then
      printf '%s: %s resolves outside the bundle: %s\n' "${file#"$bundle"/}" "$soname" "$path"
      bad=1
    fi
  done <<<"$out"
  return "$bad"
}

# train_runs BUNDLE DATA OUT NP: singleton (NP=1, no launcher) or bin/mpirun -np NP, tiny preset;
# checks metrics.jsonl has one line per step and run.json the world size.
train_runs() {
  local b=$1 data=$2 out=$3 np=$4 steps=$((1 + $4))
  local cmd=("$b/bin/zerotrain" train --preset tiny --data "$data" --out "$out" --steps "$steps"
    --micro-batch 2 --seq-len 32 --lr 5e-3 --seed 7 --log-every 1 --zero-stage 2)
  [ "$np" -eq 1 ] || cmd=("$b/bin/mpirun" --oversubscribe -np "$np" "${cmd[@]}")
  "${cmd[@]}" >"$out.log" 2>&1 || {
    cat "$out.log" >&2
    fail "np=$np train failed: ${cmd[*]}"
  }
  [ "$(grep -c '"step"' "$out/metrics.jsonl")" -eq "$steps" ] ||
    fail "np=$np: $out/metrics.jsonl does not have $steps steps"
  grep -Eq '"world_size": *'"$np"'\b' "$out/run.json" || fail "np=$np: run.json world_size is not $np"
  note "np=$np: trained $steps steps ($(tail -n 1 "$out.log"))"
}

# shellcheck source=hide_system_copies.sh
. "$(dirname "$(readlink -f "$0")")/hide_system_copies.sh"

# ---- (e), in a private mount namespace: the system copies hidden ----
if [ "${1:-}" = "--hidden" ]; then
  B=$2 WORK=$3
  hidden=$(hide_system_copies "$B" "$WORK") || exit 1
  libmpi_src=$(awk '$1 == "lib/libmpi.so.40" { print $3 }' "$B/MANIFEST")
  [ ! -s "$libmpi_src" ] || fail "$libmpi_src still readable after hiding"
  ! mpirun --version >/dev/null 2>&1 || fail "the system mpirun still runs after hiding"
  note "(e) hidden: $hidden (Open MPI, PMIx); the system mpirun fails"
  train_runs "$B" "$WORK/data.h5" "$WORK/hidden1" 1
  train_runs "$B" "$WORK/data.h5" "$WORK/hidden2" 2
  exit 0
fi

MAKE_BUNDLE=$(readlink -f "${1:?make_bundle.sh}")
BIN=$(readlink -f "${2:?zerotrain binary}")
SRC=$(readlink -f "${3:?source dir}")
command -v patchelf >/dev/null || {
  note "SKIP: patchelf is not installed (./run.sh deps installs it)"
  exit 77
}

WORK=$(readlink -f "$(mktemp -d /tmp/zt-bundle-test.XXXXXX)")
trap '[ -n "${ZT_BUNDLE_KEEP:-}" ] || rm -rf "$WORK"' EXIT
cd "$WORK"
"$MAKE_BUNDLE" "$BIN" "$WORK/made/bundle" || fail "make_bundle.sh failed"
mkdir "$WORK/moved"
mv "$WORK/made/bundle" "$WORK/moved/zt"
rmdir "$WORK/made"
B=$WORK/moved/zt
note "bundle made in $WORK/made/bundle, moved to $B ($(du -sh "$B" | cut -f1))"

# The environment of a bare host: no library path, no Open MPI/PMIx/hwloc settings but these.
while IFS= read -r v; do
  case $v in LD_LIBRARY_PATH | LD_PRELOAD | OPAL_* | PMIX_* | OMPI_* | HWLOC_* | ZT_BUNDLE) unset "$v" ;; esac
done < <(compgen -e)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=1

# ---- (a) ----
checked=("$B"/libexec/*)
for c in btl_vader btl_self btl_tcp pml_ob1 pmix_ext3x io_ompio ess_singleton plm_rsh; do
  [ -f "$B/lib/openmpi/mca_$c.so" ] || fail "Open MPI component mca_$c.so is not in the bundle"
  checked+=("$B/lib/openmpi/mca_$c.so")
done
if compgen -G "$B/lib/pmix/*.so" >/dev/null; then checked+=("$B"/lib/pmix/*.so); fi
errors=$(for f in "${checked[@]}"; do check_inside "$B" "$f" || true; done)
[ -z "$errors" ] || fail "libraries not resolved inside the bundle:"$'\n'"$errors"
cp "$B/libexec/zerotrain" "$WORK/zerotrain-no-runpath"
patchelf --remove-rpath "$WORK/zerotrain-no-runpath"
if check_inside "$B" "$WORK/zerotrain-no-runpath" >/dev/null; then
  fail "negative control: zerotrain without RUNPATH passed the inside-the-bundle check"
fi
note "(a) ${#checked[@]} ELF files resolve every non-system library inside the bundle"

# ---- (b) ----
paths=$("$B/bin/ompi_info" --parsable --path all) || fail "bin/ompi_info failed"
for kv in prefix="$B" pkglibdir="$B/lib/openmpi" pkgdatadir="$B/share/openmpi" \
  sysconfdir="$B/etc" bindir="$B/bin"; do
  grep -qx "path:${kv%%=*}:${kv#*=}" <<<"$paths" || fail "ompi_info: ${kv%%=*} is not ${kv#*=}:"$'\n'"$paths"
done
components=$("$B/bin/ompi_info" --parsable) || fail "bin/ompi_info --parsable failed"
grep -q '^mca:btl:vader:' <<<"$components" || fail "ompi_info does not list btl vader"
note "(b) bin/ompi_info: prefix, pkglibdir, pkgdatadir, sysconfdir, bindir in the bundle"

# ---- (c), (d) under LD_DEBUG=libs ----
mkdir "$WORK/ld"
export LD_DEBUG=libs LD_DEBUG_OUTPUT=$WORK/ld/ld
version=$("$B/bin/zerotrain" --version) || fail "bin/zerotrain --version failed"
"$B/bin/zerotrain" prepare-data --text "$SRC/inputs/data/sample.txt" --out "$WORK/data.h5" \
  >"$WORK/prepare.log" 2>&1 || {
  cat "$WORK/prepare.log" >&2
  fail "bin/zerotrain prepare-data failed"
}
note "(c) $version; prepare-data: $(tail -n 1 "$WORK/prepare.log")"
train_runs "$B" "$WORK/data.h5" "$WORK/run1" 1
train_runs "$B" "$WORK/data.h5" "$WORK/run2" 2
unset LD_DEBUG LD_DEBUG_OUTPUT

# Every object any process initialised, resolved; none may be a bundled file's system source.
mapfile -t loaded < <(sed -n 's/^ *[0-9]*:[[:space:]]*calling init: //p' "$WORK"/ld/ld.* | sort -u |
  while IFS= read -r p; do readlink -f "$p"; done | sort -u)
[ ${#loaded[@]} -gt 0 ] || fail "LD_DEBUG recorded no loaded objects"
# Searched as one string: `printf ... | grep -q` under pipefail fails when grep's early exit
# leaves printf a closed pipe (SIGPIPE), as it did now and then under load.
loaded_list=$(printf '%s\n' "${loaded[@]}")
mapfile -t sources < <(manifest_sources "$B")
for p in "${loaded[@]}"; do
  for s in "${sources[@]}"; do
    [[ $p == "$s" || $p == "$s"/* ]] && fail "a process loaded $p, the system copy of a bundled file"
  done
done
for want in lib/libmpi.so.40 lib/libopen-rte.so.40 lib/libhdf5_openmpi.so.103 \
  lib/openmpi/mca_btl_vader.so lib/openmpi/mca_pmix_ext3x.so; do
  grep -qx -- "$B/$want" <<<"$loaded_list" && continue
  note "the loader's logs ($(find "$WORK/ld" -type f | wc -l) files) on ${want##*/}:"
  grep -h -- "${want##*/}" "$WORK"/ld/ld.* | sort | uniq -c | sort -rn | head -n 20 >&2 || true
  fail "no process loaded the bundle's $want"
done
# Which ess component a process opens is Open MPI's choice (its schizo components read the
# environment: a singleton here opens only ess_singleton, elsewhere another); that one came from
# the bundle is what matters.
ess=$(sed -n "s|^$B/lib/openmpi/mca_ess_\\(.*\\)\\.so$|\\1|p" <<<"$loaded_list" | paste -sd,)
[ -n "$ess" ] || fail "no process loaded an ess component from the bundle's lib/openmpi"
if compgen -G "$B/lib/pmix/*.so" >/dev/null; then
  grep -q "^$B/lib/pmix/" <<<"$loaded_list" || fail "no process loaded PMIx's components from the bundle"
fi
grep -qh 'initialize program: .*/bin/orted$' "$WORK"/ld/ld.* || note "note: no orted started"
note "(c,d) LD_DEBUG: $(grep -c "^$B/" <<<"$loaded_list") objects from the bundle (ess: $ess), none of the ${#sources[@]} system sources"

# ---- (e) ----
if unshare -m --propagation private true 2>/dev/null; then
  unshare -m --propagation private "$0" --hidden "$B" "$WORK" || fail "runs with the system copies hidden failed"
else
  note "(e) skipped: no private mount namespace here (needs root); (a)-(d) passed"
fi
note "PASS"
