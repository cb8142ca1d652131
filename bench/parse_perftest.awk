# parse_perftest.awk - read a perftest (ib_*_bw / ib_*_lat) report and print its result row as
# one line of key=value pairs:
#   bytes= iters=                        always, from "#bytes" and "#iterations"
#   bw_peak_gbps= bw_avg_gbps=           BW tests (MB/sec columns are converted: MiB = 2^20 B)
#   msgrate_mpps=                        BW tests
#   lat_min_us= lat_max_us= lat_typical_us= lat_avg_us= lat_stdev_us= lat_p99_us= lat_p999_us=
#                                        latency tests (iteration mode; duration mode has t_avg only)
# or "parse_error=<why>" when no complete result row is found.
#
# The columns are located by their header names, not by position, because perftest's rows differ
# between tests, versions and options (e.g. --report_gbits, dual-port, duration mode). The header is
# a run of names, each "#word" or "words[unit]", e.g.
#   " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
# and the row under it holds one number per name. When several result tables are printed, the last
# complete row wins.

function trim(s) {
  sub(/^[ \t]+/, "", s)
  sub(/[ \t]+$/, "", s)
  return s
}

# normalized key for one header name, "" for columns we do not report
function key_of(h) {
  if (h == "#bytes") return "bytes"
  if (h == "#iterations") return "iters"
  if (h == "BW peak[Gb/sec]") return "bw_peak_gbps"
  if (h == "BW average[Gb/sec]") return "bw_avg_gbps"
  if (h == "BW peak[MB/sec]") return "bw_peak_MiBps"
  if (h == "BW average[MB/sec]") return "bw_avg_MiBps"
  if (h == "MsgRate[Mpps]") return "msgrate_mpps"
  if (h == "t_min[usec]") return "lat_min_us"
  if (h == "t_max[usec]") return "lat_max_us"
  if (h == "t_typical[usec]") return "lat_typical_us"
  if (h == "t_avg[usec]") return "lat_avg_us"
  if (h == "t_stdev[usec]") return "lat_stdev_us"
  if (h == "99% percentile[usec]") return "lat_p99_us"
  if (h == "99.9% percentile[usec]") return "lat_p999_us"
  return ""
}

function is_num(s) {
  return s ~ /^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/
}

# a header line: split it into names
/^[ \t]*#bytes[ \t]/ {
  h = trim($0)
  ncol = 0
  while (h != "") {
    if (substr(h, 1, 1) == "#") {
      p = match(h, /[ \t]/)
      if (p == 0) { tok = h; h = "" } else { tok = substr(h, 1, p - 1); h = substr(h, p + 1) }
    } else {
      p = index(h, "]")
      if (p == 0) { tok = h; h = "" } else { tok = substr(h, 1, p); h = substr(h, p + 1) }
    }
    hdr[++ncol] = trim(tok)
    h = trim(h)
  }
  in_table = 1
  next
}

# a row under the header: as many numbers as names (perftest may append text such as a warning)
in_table && NF >= ncol && is_num($1) {
  for (i = 1; i <= ncol; i++) if (!is_num($i)) next
  nres = 0
  for (i = 1; i <= ncol; i++) {
    k = key_of(hdr[i])
    if (k == "") continue
    v = $i
    if (k ~ /_MiBps$/) {                # MiB/s -> Gb/s (10^9 bit)
      sub(/_MiBps$/, "_gbps", k)
      v = sprintf("%.4f", v * 1048576 * 8 / 1e9)
    }
    res[++nres] = k "=" v
  }
  found = 1
  out = ""
  for (i = 1; i <= nres; i++) out = out (i > 1 ? " " : "") res[i]
  next
}

/^-+[ \t]*$/ { in_table = in_table }   # separators neither open nor close a table

END {
  if (!found) { print "parse_error=no_result_row"; exit 1 }
  print out
}
