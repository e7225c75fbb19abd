#!/usr/bin/env bash
# Freezes known answers of the Feistel order (our own algorithm, so our own output is the oracle):
# once written, these values must never change on any compiler or platform.
#   tests/golden/regenerate_feistel.sh build/bin/distsampler 1 > tests/golden/feistel.txt
#   tests/golden/regenerate_feistel.sh build/bin/distsampler 2 > tests/golden/feistel_v2.txt
# Line format: size seed epoch first | order positions first, first + 1, ...
set -eu
bin="$1"
version="${2:-1}"
if [ "$version" = 1 ]; then
  echo "# frozen by regenerate_feistel.sh; a change here changes every user's Feistel order"
else
  echo "# frozen by regenerate_feistel.sh (version $version); a change here changes every user's Feistel order"
fi
while read -r size seed epoch first count; do
  values=$("$bin" indices --order feistel --feistel-version "$version" --size "$size" \
    --world-size 1 --rank 0 --seed "$seed" --epoch "$epoch" --start "$first" --count "$count" |
    tr '\n' ' ')
  echo "$size $seed $epoch $first | ${values% }"
done <<'CASES'
1 0 0 0 1
2 0 0 0 2
5 0 0 0 5
5 1 0 0 5
16 0 0 0 16
1000 42 3 0 40
65536 7 1 100 20
65537 7 1 65500 37
1000000000000000 0 0 100000000000 10
9223372036854775808 18446744073709551615 18446744073709551615 9223372036854775800 8
CASES
