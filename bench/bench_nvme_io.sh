#!/bin/bash
# Sequential write/read GB/s of DIR with dd (O_DIRECT, 1 MiB blocks), the baseline for the NVMe
# optimizer swapper; compare with a run's nvme_read_bytes/nvme_write_bytes over its optimizer_s.
# With the build's bench_nvme_swapper (default build/bench_nvme_swapper, if present), the swapper's
# own GB/s on the same directory and amount follow, in the same run.
# Usage: bench/bench_nvme_io.sh DIR [MiB=1024] [path/to/bench_nvme_swapper]
set -euo pipefail
dir=${1:?usage: bench_nvme_io.sh DIR [MiB]}
mib=${2:-1024}
swapper=${3:-build/bench_nvme_swapper}
f="$dir/zerotrain-dd-bench.$$"
trap 'rm -f "$f"' EXIT
flag=direct
dd if=/dev/zero of="$f" bs=1M count=1 oflag=direct status=none 2>/dev/null || flag=""
echo "dd on $dir, $mib MiB, ${flag:-buffered (no O_DIRECT)}"
dd if=/dev/zero of="$f" bs=1M count="$mib" ${flag:+oflag=$flag} conv=fsync 2>&1 | tail -1 | sed 's/^/write: /'
sync
echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
dd if="$f" of=/dev/null bs=1M ${flag:+iflag=$flag} 2>&1 | tail -1 | sed 's/^/read:  /'
if [[ -x "$swapper" ]]; then
  rm -f "$f"
  echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
  "$swapper" "$dir" "$mib"
else
  echo "(no $swapper: build the bench_nvme_swapper target for the swapper's own figures)"
fi
