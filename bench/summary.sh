# Sourced by the whole-step benchmarks (pretrain.sh, moe.sh, mla.sh).
# summary_json NAME SUMMARY [EXTRA]: mt-pretrain's "[summary]" line SUMMARY as a
# Google-Benchmark-style record for bench/compare.py named NAME (ms/iteration, FLOPS from
# TFLOP/s/GPU, tokens/s, memory), EXTRA (e.g. ', "key": value') appended to its fields.
summary_json() {
  local s=$2 ms tf tok mem
  ms=$(echo "$s" | sed -n 's/.*| \([0-9.]*\) ms\/iteration.*/\1/p')
  tf=$(echo "$s" | sed -n 's/.*| \([0-9.]*\) TFLOP\/s\/GPU.*/\1/p')
  tok=$(echo "$s" | sed -n 's/.*| \([0-9.]*\) tokens\/s |.*/\1/p')
  mem=$(echo "$s" | sed -n 's/.*memory (MB): \([0-9.]*\).*/\1/p')
  printf '{"name": "%s", "run_type": "iteration", "real_time": %s, "time_unit": "ms", "FLOPS": %s, "tokens_per_second": %s, "memory_MB": %s%s}\n' \
    "$1" "$ms" "$(awk -v t="$tf" 'BEGIN { printf "%.6e", t * 1e12 }')" "$tok" "$mem" "${3:-}"
}
