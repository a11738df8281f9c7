#!/usr/bin/env bash
# functional: mt-serve. A tiny GPT-2-tokenized checkpoint of mt-pretrain, served on a free port:
# PUT /api (Megatron's text generation server's call) answers the same continuation and tokens
# as mt-generate with the same settings, for two prompts at once, also over POST; three prompts of
# different lengths, decoded over the KV cache two at a time (MT_SERVE_BATCH=2: a batch of two,
# then one alone), each mt-generate's; a request that
# is not JSON, without prompts, or with a prompt beyond the model's positions gets 400 and a
# message; another path 404, GET 405; the server then keeps serving, and returns after
# --max-requests. Continuous batching: requests arriving while others decode join the batch, each
# prompt still mt-generate's.
source "$(dirname "$0")/pretrain_common.sh"
command -v curl > /dev/null || { echo "SKIP: needs curl"; exit 77; }
d=$(mktemp -d); pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$d"' EXIT
tiny_run "$d/p.json" --tokenizer-type GPT2BPETokenizer --train-iters 3 --lr-warmup-iters 1 --save "$d/ck" > "$d/p.log" 2>&1 \
  || { cat "$d/p.log"; exit 1; }
dev=(--device "${MT_TEST_DEVICE:-cpu}")
want=$("$MT_GENERATE" --load "$d/ck" "${dev[@]}" --prompt "In the beginning" --tokens-to-generate 6 \
  --temperature 0.9 --top_p 0.95 --seed 11 --print-ids) || { echo "FAIL: mt-generate"; exit 1; }
MT_SERVE_BATCH=2 timeout 120 "$MT_SERVE" --load "$d/ck" "${dev[@]}" --port 0 --max-requests 9 --tokens-to-generate 6 > "$d/serve.log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q "listening on" "$d/serve.log" && break; sleep 0.1; done
url=$(grep -o "http://[0-9.:]*/api" "$d/serve.log") || { echo "FAIL: no server"; cat "$d/serve.log"; exit 1; }
fail=0
req() {  # method body: prints the HTTP code, then the JSON
  curl -s -X "$1" -H 'Content-Type: application/json' -d "$2" -w '\n%{http_code}\n' "${3:-$url}" | tac
}
r=$(req PUT '{"prompts": ["In the beginning", "And"], "temperature": 0.9, "top_p": 0.95, "random_seed": 11}')
code=$(echo "$r" | head -1); json=$(echo "$r" | tail -n +2)
got_ids=$(echo "$json" | jq -r '.tokens[0] | map(tostring) | join(",")')
got_text=$(echo "$json" | jq -r '.text[0]')
if [ "$code" = 200 ] && [ "$got_ids" = "$(echo "$want" | head -1)" ] && [ "$got_text" = "$(echo "$want" | tail -n +2)" ] \
   && [ "$(echo "$json" | jq '.text | length')" = 2 ]; then echo "ok PUT /api = mt-generate: $got_text"
else echo "FAIL PUT /api: $code $json; mt-generate: $want"; fail=1; fi
r2=$(req POST '{"prompts": ["In the beginning"], "temperature": 0.9, "top_p": 0.95, "random_seed": 11}')
[ "$(echo "$r2" | tail -n +2 | jq -r '.text[0]')" = "$got_text" ] && echo "ok POST" || { echo "FAIL POST: $r2"; fail=1; }
# three prompts (two prefilled alone and decoded together, then one): each mt-generate's
ps=("In the beginning God created" "And" "Then the LORD said unto")
r4=$(req PUT '{"prompts": ["In the beginning God created", "And", "Then the LORD said unto"], "tokens_to_generate": 7, "temperature": 0.8, "top_k": 20, "random_seed": 5}')
for i in 0 1 2; do
  w=$("$MT_GENERATE" --load "$d/ck" "${dev[@]}" --prompt "${ps[$i]}" --tokens-to-generate 7 \
    --temperature 0.8 --top_k 20 --seed 5 --print-ids | head -1)
  g=$(echo "$r4" | tail -n +2 | jq -r ".tokens[$i] | map(tostring) | join(\",\")")
  [ -n "$w" ] && [ "$g" = "$w" ] && echo "ok batched prompt $i = mt-generate: $g" \
    || { echo "FAIL batched prompt $i: $g, mt-generate $w"; fail=1; }
done
bad() {  # code message method body [url]
  local r; r=$(req "$3" "$4" "${5:-}")
  if [ "$(echo "$r" | head -1)" = "$1" ] && echo "$r" | grep -qF -- "$2"; then echo "ok $1: $(echo "$r" | tail -1)"
  else echo "FAIL: want $1 '$2': $r"; fail=1; fi
}
bad 400 "the body is not JSON" PUT '{"prompts": ['
bad 400 "prompts argument required" PUT '{"tokens_to_generate": 3}'
bad 400 "the model takes 32" PUT "{\"prompts\": [\"$(printf 'word %.0s' $(seq 40))\"]}"
bad 404 "the paths are /api and /completions" PUT '{}' "${url%/api}/other"
bad 405 "use PUT (or POST) /api" GET ''
r3=$(req PUT '{"prompts": ["And"], "tokens_to_generate": 2}')
[ "$(echo "$r3" | head -1)" = 200 ] && echo "ok still serving" || { echo "FAIL after errors: $r3"; fail=1; }
wait $pid; rc=$?; pid=
[ $rc = 0 ] && echo "ok returned after --max-requests" || { echo "FAIL: mt-serve rc $rc"; cat "$d/serve.log"; fail=1; }

# continuous batching: three slots, each step slowed to 50 ms so that requests overlap. A (two
# prompts, sampled, 16 tokens) starts; B (greedy, 8) joins its third slot mid-way; C waits for a
# free slot and joins while A still decodes (A's 16 steps outlast B's by far: on a GPU A's first
# steps can be slow enough that B starts beside them). Every prompt gets mt-generate's continuation with its request's settings.
export MT_KV_CHUNK=2 # (prompts prefilled in chunks of 2, in mt-generate too)
MT_SERVE_BATCH=3 MT_SERVE_STEP_DELAY_MS=50 timeout 120 "$MT_SERVE" --load "$d/ck" "${dev[@]}" --port 0 \
  --max-requests 6 --tokens-to-generate 6 > "$d/serve2.log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q "listening on" "$d/serve2.log" && break; sleep 0.1; done
url=$(grep -o "http://[0-9.:]*/api" "$d/serve2.log") || { echo "FAIL: no server"; cat "$d/serve2.log"; exit 1; }
bodies=('{"prompts": ["In the beginning", "And God said"], "tokens_to_generate": 16, "temperature": 0.9, "top_p": 0.95, "random_seed": 11}'
        '{"prompts": ["Then the LORD"], "tokens_to_generate": 8, "temperature": 0}'
        '{"prompts": ["And"], "tokens_to_generate": 6, "temperature": 0.7, "top_k": 10, "random_seed": 9}')
cpids=()
for i in 0 1 2; do
  req PUT "${bodies[$i]}" > "$d/r$i.out" &
  cpids+=($!)
  sleep 0.2
done
wait "${cpids[@]}"
# requests are read without blocking: a complete request is answered while another connection has
# sent half of its own, which is answered once complete; a client that leaves mid-request costs
# nothing but its own answer
port=$(echo "$url" | sed 's/.*:\([0-9]*\)\/api/\1/')
b5='{"prompts": ["And"], "tokens_to_generate": 2, "temperature": 0}'
exec 3<> "/dev/tcp/127.0.0.1/$port"
printf 'PUT /api HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s' "${#b5}" "${b5:0:10}" >&3
r6=$(timeout 20 curl -s -X PUT -d "$b5" -w '\n%{http_code}' "$url" | tail -1)
[ "$r6" = 200 ] && echo "ok answered while another request is half sent" \
  || { echo "FAIL: a request behind a half-sent one: $r6"; fail=1; }
printf '%s' "${b5:10}" >&3
r5=$(timeout 20 cat <&3); exec 3<&-
echo "$r5" | head -1 | grep -q "200 OK" && echo "$r5" | grep -q '"text"' && echo "ok the half-sent request, completed" \
  || { echo "FAIL: the half-sent request: $r5"; fail=1; }
exec 4<> "/dev/tcp/127.0.0.1/$port"; printf 'PUT /api HTTP/1.1\r\nContent-Le' >&4; exec 4<&-
wait $pid; rc=$?; pid=
[ $rc = 0 ] && echo "ok returned after --max-requests (6, one client gone)" \
  || { echo "FAIL: mt-serve rc $rc"; cat "$d/serve2.log"; fail=1; }
check() {  # response-file index prompt flags...
  local f=$1 i=$2 p=$3; shift 3
  local w g
  w=$("$MT_GENERATE" --load "$d/ck" "${dev[@]}" --prompt "$p" "$@" --print-ids 2> /dev/null | head -1)
  g=$(tail -n +2 "$f" | jq -r ".tokens[$i] | map(tostring) | join(\",\")")
  [ -n "$w" ] && [ "$g" = "$w" ] && echo "ok continuous: '$p' = mt-generate: $g" \
    || { echo "FAIL continuous '$p': $g, mt-generate $w"; fail=1; }
}
check "$d/r0.out" 0 "In the beginning" --tokens-to-generate 16 --temperature 0.9 --top_p 0.95 --seed 11
check "$d/r0.out" 1 "And God said" --tokens-to-generate 16 --temperature 0.9 --top_p 0.95 --seed 11
check "$d/r1.out" 0 "Then the LORD" --tokens-to-generate 8 --greedy
check "$d/r2.out" 0 "And" --tokens-to-generate 6 --temperature 0.7 --top_k 10 --seed 9
# B and C were decoded beside other requests' rows (the server's line per request)
for k in 2 3; do
  line=$(grep "request $k:" "$d/serve2.log")
  n=$(echo "$line" | sed -n 's/.*beside at most \([0-9]*\) rows.*/\1/p')
  [ -n "$n" ] && [ "$n" -ge 1 ] && echo "ok request $k joined a running batch: $line" \
    || { echo "FAIL: request $k did not overlap: '$line'"; cat "$d/serve2.log"; fail=1; }
done

# Megatron's response fields, against transformers (apps/generate/golden/expected.json, float64):
# the imported tiny GPT-2 and Llama with the NullTokenizer (prompts and texts are ids with spaces
# between them): greedy tokens, "segments" (each token's text) and "logprobs" (each token's
# log-probability after the first, within 1e-4); OpenAI's /completions (Megatron's dynamic
# server's) with echo, top-2 logprobs and a greedy continuation, likewise
golden=$(dirname "$0")/../apps/generate/golden/expected.json
for m in gpt2 llama; do
  "$MT_CONVERT" hf-to-mt "$(dirname "$0")/../apps/convert/golden/logits_$m" "$d/hf_$m" > /dev/null 2>&1 \
    || { echo "FAIL: import $m"; fail=1; continue; }
  timeout 60 "$MT_SERVE" --load "$d/hf_$m" "${dev[@]}" --tokenizer-type NullTokenizer --port 0 \
    --max-requests 10 > "$d/serve_$m.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q "listening on" "$d/serve_$m.log" && break; sleep 0.1; done
  url=$(grep -o "http://[0-9.:]*/api" "$d/serve_$m.log") || { echo "FAIL: no server"; cat "$d/serve_$m.log"; exit 1; }
  prompt=$(jq -r ".$m.prompt | map(tostring) | join(\" \")" "$golden")
  r=$(req PUT "{\"prompts\": [\"$prompt\"], \"tokens_to_generate\": 10, \"temperature\": 0, \"logprobs\": true}" | tail -n +2)
  # OpenAI's completions (Megatron's dynamic server): the prompt scored (echo, max_tokens 0, the
  # top 2 alternatives), then the greedy continuation of the prompt given as ids
  c1=$(req POST "{\"prompt\": \"$prompt\", \"max_tokens\": 0, \"echo\": true, \"logprobs\": 2}" "${url%/api}/v1/completions" | tail -n +2)
  c2=$(req POST "{\"prompt\": $(jq -c ".$m.prompt" "$golden"), \"max_tokens\": 10, \"temperature\": 0, \"logprobs\": 0}" "${url%/api}/completions" | tail -n +2)
  c3=$(req POST '{"max_tokens": 3}' "${url%/api}/completions")
  # stop texts: the continuation ends with the token that completes the first one found, the
  # text before it (the greedy continuation's 2nd token as one stop, its 2nd and 3rd as another)
  g2=$(jq -r ".$m.greedy[6]" "$golden"); g23=$(jq -r ".$m.greedy[6:8] | map(tostring) | join(\" \")" "$golden")
  s1=$(req POST "{\"prompt\": \"$prompt\", \"max_tokens\": 10, \"temperature\": 0, \"stop\": [\"999\", \"$g23\"]}" "${url%/api}/completions" | tail -n +2)
  s2=$(req POST "{\"prompt\": \"$prompt\", \"max_tokens\": 10, \"temperature\": 0, \"stop\": \"$g2\", \"echo\": true}" "${url%/api}/completions" | tail -n +2)
  # streamed (server-sent events): s1's request, its text in pieces, then [DONE]
  ev=$(curl -sN -X POST -H 'Content-Type: application/json' "${url%/api}/completions" \
    -d "{\"prompt\": \"$prompt\", \"max_tokens\": 10, \"temperature\": 0, \"stop\": [\"999\", \"$g23\"], \"stream\": true}" \
    | sed -n 's/^data: //p')
  st_text=$(echo "$ev" | grep -v '^\[DONE\]$' | jq -rj '.choices[0].text')
  st_why=$(echo "$ev" | grep -v '^\[DONE\]$' | jq -r '.choices[0].finish_reason // empty')
  if [ "$(echo "$ev" | tail -1)" = "[DONE]" ] && [ "$st_text" = "$(echo "$s1" | jq -r '.choices[0].text')" ] \
     && [ "$st_why" = stop ] && [ "$(echo "$ev" | wc -l)" -ge 3 ] \
     && [ "$(echo "$ev" | grep -v '^\[DONE\]$' | jq -r .id | sort -u | wc -l)" = 1 ]; then
    echo "ok $m stream: $(( $(echo "$ev" | wc -l) - 1 )) events, text '$st_text' = the answer's, finish stop"
  else echo "FAIL $m stream: $ev / $s1"; fail=1; fi
  # what Megatron's dynamic server refuses too
  for f in '"n": 17/n: an integer from 1 to 16' '"best_of": 3/best_of > 1 not supported' \
           '"stream": true, "logprobs": 1/stream with logprobs is not supported yet'; do
    c4=$(req POST "{\"prompt\": \"$prompt\", ${f%%/*}}" "${url%/api}/completions")
    echo "$c4" | head -1 | grep -q 400 && echo "$c4" | grep -qF "${f#*/}" && echo "ok /completions ${f%%/*}: 400" \
      || { echo "FAIL /completions ${f%%/*}: $c4"; fail=1; }
  done
  wait $pid; pid=
  want=$(jq -c ".$m.greedy" "$golden")
  err=$(jq -n --argjson a "$(echo "$r" | jq -c '.logprobs[0]')" --argjson b "$(jq -c ".$m.logprobs" "$golden")" \
    'if ($a | length) != ($b | length) then 1e9 else [range(0; $a | length) | $a[.] - $b[.] | if . < 0 then -. else . end] | max end')
  if [ "$(echo "$r" | jq -c '.tokens[0]')" = "$want" ] \
     && [ "$(echo "$r" | jq -c '.segments[0] | map(tonumber)')" = "$want" ] \
     && [ "$(echo "$r" | jq -r '.text[0]')" = "$(echo "$want" | jq -r 'map(tostring) | join(" ")')" ] \
     && awk -v e="$err" 'BEGIN { exit !(e <= 1e-4) }'; then
    echo "ok $m: tokens, segments and text = transformers' greedy; logprobs within $err"
  else echo "FAIL $m: $r; want tokens $want, logprobs off by $err"; fail=1; fi
  # c1: token_logprobs = [null] + the prompt's; top_logprobs the golden top 2 (ids as texts)
  e1=$(jq -n --argjson c "$c1" --slurpfile g "$golden" --arg m "$m" '
    ($g[0][$m]) as $w | ($c.choices[0].logprobs) as $l | ($w.prompt | length) as $n
    | if ($l.token_logprobs | length) != $n or $l.token_logprobs[0] != null or $l.top_logprobs[0] != null
      then 1e9 else
      [range(1; $n) | . as $k
       | ($l.token_logprobs[$k] - $w.logprobs[$k - 1]),
         ($w.top2[$k - 1][] as $t | ($l.top_logprobs[$k][$t[0] | tostring] // 1e9) - $t[1])]
      | map(if . < 0 then -. else . end) | max end')
  # c2: the greedy ids, finish "length", usage, generation_log_probs = the golden ones
  e2=$(jq -n --argjson c "$c2" --slurpfile g "$golden" --arg m "$m" '
    ($g[0][$m]) as $w | ($c.choices[0]) as $x | ($w.prompt | length) as $n
    | if ($x.generation_token_ids != $w.greedy[$n:]) or $x.finish_reason != "length"
         or $c.usage != {"prompt_tokens": $n, "completion_tokens": 10, "total_tokens": ($n + 10)}
         or $x.text != ($w.greedy[$n:] | map(tostring) | join(" "))
      then 1e9 else
      [range(0; 10) | ($x.generation_log_probs[.] - $w.logprobs[$n - 1 + .])
       | if . < 0 then -. else . end] | max end')
  if awk -v a="$e1" -v b="$e2" 'BEGIN { exit !(a <= 1e-4 && b <= 1e-4) }'; then
    echo "ok $m /completions: echo logprobs and top 2 within $e1, greedy continuation within $e2"
  else echo "FAIL $m /completions: $e1 $e2: $c1 / $c2"; fail=1; fi
  echo "$c3" | head -1 | grep -q 400 && echo "$c3" | grep -q "prompt: a text" && echo "ok /completions without a prompt: 400" \
    || { echo "FAIL /completions without a prompt: $c3"; fail=1; }
  w=$(jq -c ".$m.greedy" "$golden")
  if [ "$(echo "$s1" | jq -c '.choices[0].generation_token_ids')" = "$(echo "$w" | jq -c '.[5:8]')" ] \
     && [ "$(echo "$s1" | jq -r '.choices[0].text')" = "$(echo "$w" | jq -r '.[5:6] | map(tostring) | join(" ")') " ] \
     && [ "$(echo "$s1" | jq -r '.choices[0].finish_reason')" = stop ] \
     && [ "$(echo "$s2" | jq -c '.choices[0].generation_token_ids')" = "$(echo "$w" | jq -c '.[5:7]')" ] \
     && [ "$(echo "$s2" | jq -r '.choices[0].text')" = "$prompt $(echo "$w" | jq -r '.[5]') " ]; then
    echo "ok $m /completions stop texts: $(echo "$s1" | jq -c '.choices[0].text'), echo $(echo "$s2" | jq -c '.choices[0].text')"
  else echo "FAIL $m /completions stop texts: $s1 / $s2"; fail=1; fi
done

# Megatron's /api fields: a tiny GPT-2 trained on "Amen:\n" lines, whose greedy continuation of
# "Amen:" is "\n" (198) then "Amen"... stop_on_eol ends it after the "\n" (kept), stop_on_double_eol
# never ("\n" never follows "\n"), prevent_newline_after_colon forbids the "\n"; add_BOS puts the
# end-of-document token first (and allows an empty prompt); no_log leaves no line; bad fields get
# Megatron's messages. Over the batch and alone (MT_SERVE_BATCH=1).
if [ -n "${MT_PREPROCESS:-}" ]; then
  awk 'BEGIN { for (i = 0; i < 200; i++) { s = ""; for (j = 0; j < 12; j++) s = s "Amen:\\n"; printf "{\"text\": \"%s\"}\n", s } }' > "$d/amen.jsonl"
  "$MT_PREPROCESS" --input "$d/amen.jsonl" --output-prefix "$d/amen" --workers 1 > /dev/null \
    || { echo "FAIL: preprocess"; exit 1; }
  "$MT_PRETRAIN" "${nodrop[@]}" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
    --micro-batch-size 4 --global-batch-size 8 --data-path "$d/amen_text_document" --split 100,0,0 \
    --tokenizer-type GPT2BPETokenizer --train-iters 40 --lr 3e-3 --lr-warmup-iters 2 --log-interval 20 \
    --seed 7 "${dev[@]}" --save "$d/amen_ck" > "$d/amen.log" 2>&1 || { echo "FAIL: train"; cat "$d/amen.log"; exit 1; }
  for batch in 4 1; do
    MT_SERVE_BATCH=$batch timeout 120 "$MT_SERVE" --load "$d/amen_ck" "${dev[@]}" --port 0 --max-requests 27 \
      --tokens-to-generate 6 > "$d/serve_amen.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do grep -q "listening on" "$d/serve_amen.log" && break; sleep 0.1; done
    url=$(grep -o "http://[0-9.:]*/api" "$d/serve_amen.log") || { echo "FAIL: no server"; cat "$d/serve_amen.log"; exit 1; }
    # the continuations of "Amen:" (3 tokens: A men :) and "Amen:\nAmen:" (7)
    toks() { req PUT "{\"prompts\": [\"Amen:\", \"Amen:\\nAmen:\"], \"temperature\": 0$1}" | tail -n +2 \
      | jq -c '[.tokens[0][3:], .tokens[1][7:]]'; }
    plain=$(toks ''); eol=$(toks ', "stop_on_eol": true'); eol2=$(toks ', "stop_on_double_eol": true')
    colon=$(toks ', "prevent_newline_after_colon": true')
    if [ "$(echo "$plain" | jq -c '[.[][0], (.[] | length)]')" = "[198,198,6,6]" ] \
       && [ "$eol" = "[[198],[198]]" ] && [ "$eol2" = "$plain" ] \
       && [ "$(echo "$colon" | jq -c '[.[][0] != 198, (.[] | length)]')" = "[true,true,6,6]" ]; then
      echo "ok stop_on_eol $eol, stop_on_double_eol = plain $plain, prevent_newline_after_colon $colon (batch $batch)"
    else echo "FAIL newline fields (batch $batch): plain $plain eol $eol eol2 $eol2 colon $colon"; fail=1; fi
    bos=$(req PUT '{"prompts": ["", "Amen:"], "add_BOS": true, "temperature": 0, "tokens_to_generate": 1, "no_log": true}' | tail -n +2)
    [ "$(echo "$bos" | jq -c '[.tokens[0][0], .tokens[1][0:3], (.tokens[0] | length)]')" = "[50256,[50256,32,3653],2]" ] \
      && echo "ok add_BOS: $(echo "$bos" | jq -c .tokens)" || { echo "FAIL add_BOS: $bos"; fail=1; }
    body='{"prompt": ["Amen:", "Amen:\nAmen: Amen"], "max_tokens": 6, "temperature": 0, "echo": true'
    whole=$(req POST "$body}" "${url%/api}/completions" | tail -n +2 | jq -c '[.choices[] | [.text, .finish_reason]]')
    ev=$(curl -sN -X POST -H 'Content-Type: application/json' "${url%/api}/completions" -d "$body, \"stream\": true}" \
      | sed -n 's/^data: //p')
    pieces=$(echo "$ev" | grep -v '^\[DONE\]$' | jq -sc 'group_by(.choices[0].index)
      | map([(map(.choices[0].text) | add), (map(.choices[0].finish_reason) | map(select(. != null)) | .[0])])')
    [ "$pieces" = "$whole" ] && [ "$(echo "$ev" | tail -1)" = "[DONE]" ] \
      && echo "ok stream = the whole answer: $pieces ($(echo "$ev" | wc -l) events, batch $batch)" \
      || { echo "FAIL stream (batch $batch): $pieces / $whole / $ev"; fail=1; }
    # "n": 3 choices of each of two prompts, choice j drawn as a one-choice request with seed + j
    nb='"max_tokens": 5, "temperature": 1.0, "top_k": 50'
    three=$(req POST "{\"prompt\": [\"Amen:\", \"Amen: Amen\"], \"n\": 3, \"seed\": 40, $nb}" "${url%/api}/completions" | tail -n +2)
    ok=1
    for k in 0 1 2 3 4 5; do
      p=$([ $k -lt 3 ] && echo "Amen:" || echo "Amen: Amen")
      one=$(req POST "{\"prompt\": \"$p\", \"seed\": $((40 + k % 3)), $nb}" "${url%/api}/completions" | tail -n +2)
      [ "$(echo "$one" | jq -c '.choices[0].generation_token_ids')" = "$(echo "$three" | jq -c ".choices[$k].generation_token_ids")" ] \
        && [ "$(echo "$three" | jq ".choices[$k].index")" = $k ] || ok=0
    done
    [ $ok = 1 ] && [ "$(echo "$three" | jq -c '[.usage.prompt_tokens, .usage.completion_tokens, ([.choices[0:3][].generation_token_ids] | unique | length)]')" = "[7,30,3]" ] \
      && echo "ok n 3: $(echo "$three" | jq -c '[.choices[].generation_token_ids]') (batch $batch)" \
      || { echo "FAIL n 3 (batch $batch): $three"; fail=1; }
    bad 400 "Empty prompts require add_BOS=true" PUT '{"prompts": [""]}'
    bad 400 "max_len is no longer used.  Replace with tokens_to_generate" PUT '{"prompts": ["a"], "max_len": 3}'
    bad 400 "prompts is empty" PUT '{"prompts": []}'
    bad 400 "Maximum number of prompts is 128" PUT "{\"prompts\": [$(printf '"a",%.0s' $(seq 128))\"a\"]}"
    bad 400 "tokens_to_generate=0 implies logprobs should be True" PUT '{"prompts": ["a"], "tokens_to_generate": 0}'
    bad 400 "top_k must be equal to or greater than 0 and less than or equal to 1000" PUT '{"prompts": ["a"], "top_k": 1001}'
    bad 400 "cannot set both top-k and top-p samplings." PUT '{"prompts": ["a"], "top_k": 5, "top_p": 0.5}'
    bad 400 "stop_on_eol must be a boolean value" PUT '{"prompts": ["a"], "stop_on_eol": 1}'
    bad 400 "random_seed must be a positive integer" PUT '{"prompts": ["a"], "random_seed": -2}'
    bad 400 "beam_width: beam search is not supported yet" PUT '{"prompts": ["a"], "beam_width": 2}'
    bad 400 "top_p_decay: a decaying top_p is not supported yet" PUT '{"prompts": ["a"], "top_p": 0.5, "top_p_decay": 0.9}'
    bad 400 "temperature must be a positive number less than or equal to 100.0" PUT '{"prompts": ["a"], "temperature": 101}'
    bad 400 "the prompt has 33 tokens with BOS; the model takes 32" PUT "{\"prompts\": [\"$(printf ' a%.0s' $(seq 32))\"], \"add_BOS\": true, \"tokens_to_generate\": 0, \"logprobs\": true}"
    wait $pid; rc=$?; pid=
    [ $rc = 0 ] || { echo "FAIL: mt-serve rc $rc"; cat "$d/serve_amen.log"; fail=1; }
    n=$(grep -c "mt-serve: request" "$d/serve_amen.log")
    [ "$n" = 13 ] && echo "ok no_log: 13 request lines of 14 answered" || { echo "FAIL no_log: $n lines"; cat "$d/serve_amen.log"; fail=1; }
  done
fi
exit $fail
