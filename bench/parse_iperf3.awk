# parse_iperf3.awk - from iperf3 -J output print "tcp_gbps=<receiver Gb/s>" (end.sum_received,
# bits per second / 1e9) and "tcp_sender_gbps=" (end.sum_sent), or parse_error=... / iperf3_error=...
# iperf3 pretty-prints its JSON one member per line, which is all this relies on:
#   "sum_sent": { ... "bits_per_second": 3.1e+10, ... }, "sum_received": { ... }
/"sum_sent"[ \t]*:/     { sect = "sent" }
/"sum_received"[ \t]*:/ { sect = "recv" }
/"bits_per_second"[ \t]*:/ && sect != "" {
  v = $0
  sub(/.*"bits_per_second"[ \t]*:[ \t]*/, "", v)
  sub(/[ \t]*,?[ \t]*$/, "", v)
  if (sect == "sent" && sent == "") sent = v
  if (sect == "recv" && recv == "") recv = v
  sect = ""
}
/"error"[ \t]*:/ {
  e = $0
  sub(/.*"error"[ \t]*:[ \t]*"/, "", e)
  sub(/"[ \t]*,?[ \t]*$/, "", e)
  gsub(/[ \t]+/, "_", e)
  err = e
}
END {
  if (recv != "") {
    printf "tcp_gbps=%.2f", recv / 1e9
    if (sent != "") printf " tcp_sender_gbps=%.2f", sent / 1e9
    printf "\n"
  } else if (err != "") {
    print "iperf3_error=" err
    exit 1
  } else {
    print "parse_error=no_sum_received"
    exit 1
  }
}
