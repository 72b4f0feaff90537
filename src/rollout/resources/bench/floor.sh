#!/bin/sh
# The floor `inv bench` measures rollout against: the same steps on one host, in one shell
# session, polling every 50 ms. The controller has already scp'd the release's files into
# <root>/releases/.floor-<release id>/ with its RELEASE.json (one scp); this is the one ssh:
#   sh -s -- ROOT RELEASE_ID STATUS_URL VALIDATE_ADDR C1 SHA256SUMS [CORDON UNCORDON SETTLE] < floor.sh
# Steps: check the files' sha256 and put the release in place, evict it from the page
# cache; run the playbook's cordon command (if any) and wait its settle (the bench's hosts
# are quiet: nothing is in flight to read from /status);
# set the supervisor's hold and SIGTERM the daemon its pidfile names; wait until
# that process is gone and the working set is back under the new budget; switch current;
# release the hold and wait until the supervisor runs the new release; wait for the status
# port; validate with cuzk-bench and read its result line; prune to the 3 newest releases;
# run the uncordon command.
# Prints "floor: validated RELEASE_ID" and exits 0 only when the proof COMPLETED.
set -eu
root=$1 rid=$2 status_url=$3 addr=$4 c1=$5 sums=$6
cordon=${7:-} uncordon=${8:-} settle=${9:-0}
rel="$root/releases/$rid" partial="$root/releases/.floor-$rid" state="$root/rollout"
poll() { sleep 0.05; }
fail() { echo "floor: $*" >&2; exit 1; }

cd "$partial"
printf '%s' "$sums" | sha256sum -c --quiet - || fail "sha256 mismatch"
names=$(printf '%s' "$sums" | awk '{ print $2 }')
for f in $names; do chmod 0755 -- "$f" && dd if="$f" iflag=nocache count=0 status=none; done
cd "$root"
rm -rf -- "$rel" && mv -T -- "$partial" "$rel"

if [ -n "$cordon" ]; then sh -c "$cordon" >/dev/null || fail "cordon failed"; sleep "$settle"; fi
touch -- "$state/hold"
pid=$(cut -d' ' -f1 "$state/daemon.pid")
kill -TERM "$pid" 2>/dev/null || true
while grep -qv '^[^)]*) [ZX] ' "/proc/$pid/stat" 2>/dev/null; do poll; done

budget=$(sed -n 's/^total_budget *= *"\([0-9]*\)MiB".*/\1/p' "$root/zk/cuzk.toml")
[ -n "$budget" ] || fail "no total_budget in MiB in $root/zk/cuzk.toml"
cg=/sys/fs/cgroup
base=$(tail -n 50 "$state/starts.jsonl" 2>/dev/null | grep -o '"working_set": [0-9]*' |
  awk '{ if (min == "" || $2 < min) min = $2 } END { print (min == "" ? -1 : min) }')
memory_back() {  # as the drain: headroom for the budget, or the working set near its baseline
  if [ -f $cg/memory.max ]; then
    usage=$(cat $cg/memory.current) limit=$(cat $cg/memory.max) stat=$cg/memory.stat key=inactive_file
  else
    usage=$(cat $cg/memory/memory.usage_in_bytes) limit=$(cat $cg/memory/memory.limit_in_bytes)
    stat=$cg/memory/memory.stat key=total_inactive_file
  fi
  awk -v k="$key" -v u="$usage" -v l="$limit" -v b="$budget" -v base="$base" '
    $1 == k { ws = u - $2; slack = l / 100 > 16777216 ? l / 100 : 16777216
              exit !(l - ws >= b * 1048576 || (base >= 0 && ws <= base + slack)) }' "$stat"
}
i=0
until memory_back; do
  i=$((i + 1)); [ $i -lt 6000 ] || fail "memory not back within 300 s"; poll
done

ln -sfn -- "releases/$rid" "$root/current.new" && mv -T -- "$root/current.new" "$root/current"
rm -f -- "$state/hold"
i=0
until grep -qF -- "$rel" "$state/daemon.pid" 2>/dev/null; do
  i=$((i + 1)); [ $i -lt 1200 ] || fail "supervisor did not start $rid within 60 s"; poll
done
i=0
until curl -fsS --max-time 1 -o /dev/null "$status_url"; do
  i=$((i + 1)); [ $i -lt 1200 ] || fail "status port did not answer within 60 s"; poll
done
# cuzk binds its gRPC port after the status port: wait until it accepts (curl 7: refused)
i=0
until curl -s --max-time 1 -o /dev/null "$addr/"; [ $? -ne 7 ]; do
  i=$((i + 1)); [ $i -lt 1200 ] || fail "gRPC port did not accept within 60 s"; poll
done

out=$(timeout -k 5 600 "$rel/cuzk-bench" -a "$addr" single -t porep --c1 "$c1") || true
printf '%s\n' "$out" | grep -q '^status:[[:space:]]*COMPLETED' || fail "validation: $out"

ls -1t "$root/releases" | grep -vxF -- "$rid" | tail -n +3 | while read -r old; do
  rm -rf -- "${root:?}/releases/$old"
done
[ -z "$uncordon" ] || sh -c "$uncordon" >/dev/null || fail "uncordon failed"
echo "floor: validated $rid"
